// The `leap` command as a user runs it: real processes, real files, exit codes and messages.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

using leap::e2e::leap_shell;

std::string source(const std::string& relative) {
  return std::string(LEAP_SOURCE_DIR) + "/" + relative;
}

class scratch_file {
 public:
  scratch_file(const std::string& name, const std::string& text)
      : path_(std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path_) << text;
  }
  ~scratch_file() { std::filesystem::remove(path_); }
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(LeapCli, EverySubcommandHasHelp) {
  for (const char* args : {"--help", "config --help", "config check --help", "config keys --help",
                           "simulate --help"}) {
    SCOPED_TRACE(args);
    const auto out = leap_shell(args);
    EXPECT_EQ(out.exit_code, 0) << out.text;
    EXPECT_NE(out.text.find("Usage:"), std::string::npos) << out.text;
  }
}

TEST(LeapCli, NoSubcommandIsAnError) {
  const auto out = leap_shell("");
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.text.find("subcommand"), std::string::npos) << out.text;
}

TEST(LeapCli, ConfigCheckPrintsTheResolvedConfig) {
  // From the source folder, as the quickstart's relative data.train is meant to be read.
  const auto out = leap::e2e::run_leap({"config", "check", "configs/quickstart.yaml"},
                                       std::chrono::seconds(60), LEAP_SOURCE_DIR);
  EXPECT_EQ(out.exit_code, 0) << out.output;
  const auto& text = out.output;
  // Keys the file leaves out appear with their defaults.
  EXPECT_NE(text.find("lr: 1.0e-06"), std::string::npos) << text;
  EXPECT_NE(text.find("group_size: 4"), std::string::npos) << text;
}

TEST(LeapCli, ConfigCheckForSimulateNeedsNoTasks) {
  const auto out =
      leap_shell("config check --for simulate '" + source("configs/quickstart.yaml") + "'");
  EXPECT_EQ(out.exit_code, 0) << out.text;
  // Keys the file leaves out appear with their defaults.
  EXPECT_NE(out.text.find("lr: 1.0e-06"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("group_size: 4"), std::string::npos) << out.text;
}

struct bad_config_case {
  const char* name;
  const char* yaml;
  const char* expected;  // substring of the message, with the line and the key
};

TEST(LeapCli, ConfigCheckRejectsEachKindOfBadConfigPrecisely) {
  const bad_config_case cases[] = {
      {"unknown key", "gate:\n  tau_mni: 2\n", ":2: gate.tau_mni: unknown key"},
      {"wrong type", "rollout:\n  group_size: eight\n", ":2: rollout.group_size:"},
      {"tau order", "gate:\n  unit: count\n  tau_min: 5\n  tau_max: 3\n", "gate.tau_min"},
      {"group too small", "rollout:\n  group_size: 1\n", ":2: rollout.group_size:"},
      {"no turns", "rollout:\n  max_turns: 0\n", ":2: rollout.max_turns:"},
      {"yaml syntax", "gate: [unclosed\n", ":"},
      {"list for a scalar", "learner:\n  lr: [1, 2]\n", ":2: learner.lr:"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    scratch_file file("bad.yaml", c.yaml);
    const auto out = leap_shell("config check '" + file.path() + "'");
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_NE(out.text.find(file.path()), std::string::npos) << out.text;
    EXPECT_NE(out.text.find(c.expected), std::string::npos) << out.text;
  }
}

// The first line of `leap <command>`'s error, without its "leap ...: error: " prefix.
std::string first_error(const std::string& output) {
  const std::string marker = ": error: ";
  const auto at = output.find(marker);
  if (at == std::string::npos) {
    return "";
  }
  const auto start = at + marker.size();
  return output.substr(start, output.find('\n', start) - start);
}

// One place for every rule: each config `leap run` refuses at its start, `leap config check`
// refuses with the same message (and line), and `leap run` refuses before it creates anything.
TEST(LeapCli, ConfigCheckRefusesWhatRunRefusesWithTheSameMessage) {
  const auto run_dir =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_never_created");
  const std::string head = "experiment:\n  run_dir: " + run_dir.string() + "\ndata:\n";
  const std::string cpp_suite =
      head + "  train: " + source("sandbox/suite") + "\n  task_kinds: [cpp]\n";
  const struct {
    const char* name;
    std::string yaml;
    std::string expected;  // in the message; ":N: key" where the key is set on line N
  } cases[] = {
      {"empty file", "", "the config is empty"},
      {"comment only", "# nothing yet\n", "the config is empty"},
      {"null document", "~\n", "the config is empty"},
      {"empty data.train", head + "  train: \"\"\n", ":4: data.train: no task suite given"},
      {"missing data.train", head + "  train: /nonexistent/tasks.jsonl\n",
       ":4: data.train: /nonexistent/tasks.jsonl: no such file or folder"},
      {"unknown task kind",
       head + "  train: " + source("sandbox/suite") + "\n  task_kinds: [fortran]\n",
       ":5: data.task_kinds: unknown task kind 'fortran'"},
      {"unicode task kind",
       head + "  train: " + source("sandbox/suite") + "\n  task_kinds: [c\u00fcda]\n",
       ":5: data.task_kinds: unknown task kind"},
      {"torch learner, embedded server without a model",
       cpp_suite + "learner:\n  kind: torch\n  model_path: m\npolicy:\n  flavour: embedded\n",
       ":7: policy.model: is required"},
      {"tokenizer folder without a tokenizer",
       cpp_suite + "policy:\n  tokenizer: /nonexistent/model\n",
       ":7: policy.tokenizer: cannot read /nonexistent/model/tokenizer.json"},
      {"tokenizer with the embedded scripted backend",
       cpp_suite + "policy:\n  flavour: embedded\n  tokenizer: models/policy\n",
       ":8: policy.tokenizer: needs policy.model with policy.flavour embedded"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    scratch_file file("refused.yaml", c.yaml);
    const auto check = leap_shell("config check '" + file.path() + "'");
    const auto run = leap_shell("run '" + file.path() + "'");
    EXPECT_EQ(check.exit_code, 1) << check.text;
    EXPECT_EQ(run.exit_code, 1) << run.text;
    EXPECT_NE(first_error(check.text).find(file.path()), std::string::npos) << check.text;
    EXPECT_NE(first_error(check.text).find(c.expected), std::string::npos) << check.text;
    EXPECT_EQ(first_error(check.text), first_error(run.text)) << run.text;
    EXPECT_FALSE(std::filesystem::exists(run_dir));
  }
}

TEST(LeapCli, AFolderGivenAsTheConfigIsNamedByEveryCommand) {
  const auto dir =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_config_dir.yaml");
  std::filesystem::create_directories(dir);
  for (const char* command : {"config check", "run", "simulate"}) {
    SCOPED_TRACE(command);
    const auto out = leap_shell(std::string(command) + " '" + dir.string() + "'");
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_NE(out.text.find(dir.string() + ": cannot read config: it is a directory"),
              std::string::npos)
        << out.text;
  }
  std::filesystem::remove(dir);
}

TEST(LeapCli, ConfigCheckNamesAMissingFile) {
  const auto out = leap_shell("config check /nonexistent/leap.yaml");
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.text.find("/nonexistent/leap.yaml"), std::string::npos) << out.text;
}

TEST(LeapCli, ConfigKeysIsTheMarkdownReference) {
  const auto out = leap_shell("config keys");
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_NE(out.text.find("| `gate.tau_min` |"), std::string::npos) << out.text;
}

TEST(LeapCli, SimulateRunsTheQuickstartAndWritesCsv) {
  const auto csv =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_sim.csv");
  const auto out = leap_shell("simulate '" + source("configs/quickstart.yaml") +
                              "' --steps 3 --csv '" + csv.string() + "'");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("acc@3"), std::string::npos) << out.text;
  std::ifstream in(csv);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
  }
  EXPECT_EQ(lines, 4);  // header + 3 steps
  std::filesystem::remove(csv);
}

TEST(LeapCli, SimulateRejectsABadConfigWithItsMessage) {
  scratch_file file("bad_sim.yaml", "simulation:\n  tasks: -3\n");
  const auto out = leap_shell("simulate '" + file.path() + "'");
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("simulation.tasks"), std::string::npos) << out.text;
}

}  // namespace

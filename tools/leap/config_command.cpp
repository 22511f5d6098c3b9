// `leap config`: check an experiment config and print it resolved, or print the key reference.
#include "orchestrator/config.hpp"
#include "tools/launch/launch.hpp"
#include "tools/leap/command.hpp"

#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace leap::cli {
namespace {

// Every line of a (possibly multi-line) error as its own `leap config: error:` line, so that each
// problem of a file is greppable on its own.
void print_errors(const std::string& message) {
  std::istringstream lines(message);
  std::string line;
  while (std::getline(lines, line)) {
    std::cerr << "leap config: error: " << line << "\n";
  }
}

void add_config_command(CLI::App& app, int* exit_code) {
  CLI::App* config = app.add_subcommand("config", "Check experiment configs and list their keys");
  config->require_subcommand(1);

  CLI::App* check = config->add_subcommand("check",
                                           "Check an experiment config as `leap run` will "
                                           "(see --for). On success, "
                                           "print it as YAML with every key resolved "
                                           "(defaults filled in) and exit 0; otherwise print every "
                                           "problem as FILE:LINE: key: what is wrong "
                                           "and exit 1.");
  auto path = std::make_shared<std::string>();
  auto use = std::make_shared<std::string>("run");
  check->add_option("FILE", *path, "The YAML config to check, e.g. configs/leap_cuda.yaml")
      ->required();
  check
      ->add_option("--for", *use,
                   "The command the config is for: run (also `leap submit`; every check `leap "
                   "run` makes before it starts: the keys, the task files and kinds, the remote "
                   "nodes' secret and TLS files) or simulate (the keys only; `leap simulate` needs "
                   "no tasks)")
      ->check(CLI::IsMember({"run", "simulate"}))
      ->capture_default_str();
  check->callback([path, use, exit_code] {
    result<experiment_config> checked = error{""};
    if (*use == "run") {
      auto preflight = launch::preflight_run(*path);
      checked = preflight ? result<experiment_config>(std::move(preflight->config))
                          : result<experiment_config>(preflight.err());
    } else {
      checked = load_config(*path);
    }
    if (!checked.ok()) {
      print_errors(checked.err().message);
      *exit_code = 1;
      return;
    }
    std::cout << "# " << *path << ", resolved\n" << render_config(*checked);
    *exit_code = 0;
  });

  CLI::App* keys = config->add_subcommand(
      "keys",
      "Print every config key with its type, default and meaning as a Markdown table (the README's "
      "config reference is this output).");
  keys->callback([exit_code] {
    std::cout << config_reference_markdown();
    *exit_code = 0;
  });
}

}  // namespace

LEAP_COMMAND("config", add_config_command);

}  // namespace leap::cli

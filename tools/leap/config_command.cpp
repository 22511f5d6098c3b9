// `leap config`: check an experiment config and print it resolved, or print the key reference.
#include "orchestrator/config.hpp"
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
                                           "Parse and validate an experiment config. On success, "
                                           "print it as YAML with every key resolved "
                                           "(defaults filled in) and exit 0; otherwise print every "
                                           "problem as FILE:LINE: key: what is wrong "
                                           "and exit 1.");
  auto path = std::make_shared<std::string>();
  check->add_option("FILE", *path, "The YAML config to check, e.g. configs/leap_cuda.yaml")
      ->required();
  check->callback([path, exit_code] {
    const auto loaded = load_config(*path);
    if (!loaded.ok()) {
      print_errors(loaded.err().message);
      *exit_code = 1;
      return;
    }
    std::cout << "# " << *path << ", resolved\n" << render_config(*loaded);
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

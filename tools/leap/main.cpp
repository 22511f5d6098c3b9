// The `leap` command: parses the command line, runs one subcommand, and turns its errors into a
// clear message and a non-zero exit.
#include "learner/policy.hpp"
#include "tools/leap/command.hpp"

#include <algorithm>
#include <exception>
#include <iostream>

namespace leap::cli {

std::vector<command_entry>& registered_commands() {
  static std::vector<command_entry> commands;
  return commands;
}

command_registrar::command_registrar(std::string name, command_factory add) {
  registered_commands().push_back({std::move(name), std::move(add)});
}

}  // namespace leap::cli

int main(int argc, char** argv) {
  // The CPU learner and the embedded policy server reallocate large tensors all the time.
  leap::learner::keep_freed_host_memory();
  CLI::App app{"leap: multi-turn RL rollouts for code LLMs with difficulty-conditioned pruning"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "leap 0.1.0");

  // Static registration order follows link order; sort so that --help lists commands stably.
  auto commands = leap::cli::registered_commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  int exit_code = 0;
  for (const auto& command : commands) {
    command.add(app, &exit_code);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // A command's errors are values until here; anything that still escapes is reported, not lost.
    std::cerr << "leap: error: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}

// The `leap` command (and `leap-torch`, the same commands with LibTorch linked:
// tools/leap/torch/torch.hpp): parses the command line, runs one subcommand, and turns its errors
// into a clear message and a non-zero exit.
#include "tools/leap/command.hpp"
#include "tools/leap/torch/torch.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace leap::cli {

std::vector<command_entry>& registered_commands() {
  static std::vector<command_entry> commands;
  return commands;
}

namespace {
char** saved_command_line = nullptr;
}  // namespace

void set_command_line(char** argv) { saved_command_line = argv; }

char** command_line() { return saved_command_line; }

command_registrar::command_registrar(std::string name, command_factory add) {
  registered_commands().push_back({std::move(name), std::move(add)});
}

}  // namespace leap::cli

namespace {

// learner::keep_freed_host_memory's settings (this file links no LibTorch): the CPU learner and
// the embedded policy server reallocate large tensors all the time, so blocks up to 32 MiB (glibc's
// ceiling for this setting) come from the heap, not fresh mmaps, and up to 1 GiB of free heap
// stays mapped.
void keep_freed_host_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
}

int parse_and_run(int argc, char** argv) {
  keep_freed_host_memory();
  leap::cli::set_command_line(argv);
  leap::cli::torch::install();
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
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // A command's errors are values until here; anything that still escapes (from a command or from
  // setting up the parser) is reported, not lost. stdio, not iostreams: nothing here may throw.
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leap: error: %s\n", e.what());
  } catch (...) {
    std::fputs("leap: error: an unknown exception\n", stderr);
  }
  return 1;
}

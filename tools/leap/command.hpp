// How a `leap` subcommand plugs into the command: each command file registers itself with
// LEAP_COMMAND, so adding a command touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace leap::cli {

// Adds a subcommand to `app` and returns the exit code the command will produce once parsed. The
// callback set on the subcommand runs the command; it stores its exit code in `*exit_code`.
using command_factory = std::function<void(CLI::App& app, int* exit_code)>;

struct command_entry {
  std::string name;
  command_factory add;
};

// The registered commands, in registration order. Not thread-safe; used at start-up only.
std::vector<command_entry>& registered_commands();

// The command line main() received, kept for a command that hands it on whole (torch/torch.hpp's
// hand_over). Set once at start-up, before any thread.
void set_command_line(char** argv);
// Null-terminated, as main() got it; null before set_command_line.
[[nodiscard]] char** command_line();

struct command_registrar {
  command_registrar(std::string name, command_factory add);
};

}  // namespace leap::cli

#define LEAP_CONCAT_INNER(a, b) a##b
#define LEAP_CONCAT(a, b) LEAP_CONCAT_INNER(a, b)
#define LEAP_COMMAND(name, factory) \
  static const ::leap::cli::command_registrar LEAP_CONCAT(leap_command_, __LINE__) { name, factory }

// `leap`'s side of tools/leap/torch/torch.hpp: no LibTorch here; the commands that need it hand
// their command line to `leap-torch`, installed beside this program.
#include "tools/leap/command.hpp"
#include "tools/leap/torch/torch.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

namespace leap::cli::torch {

bool linked() { return false; }

void install() {}

error hand_over() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return error{"this command needs LibTorch, which leap hands to leap-torch beside it, but " +
                 std::string("/proc/self/exe cannot be read: ") + ec.message()};
  }
  const fs::path torch_program = self.parent_path() / "leap-torch";
  char** argv = command_line();
  // Nothing is printed before a hand-over; should anything be, it comes out before leap-torch's.
  std::cout.flush();
  std::fflush(nullptr);
  ::execv(torch_program.c_str(), argv);  // returns only on failure
  const int failure = errno;
  return error{
      torch_program.string() + ": " + std::strerror(failure) +
      " (this command needs LibTorch: leap runs it with leap-torch, installed beside leap)"};
}

int init_model(const init_model_options& /*options*/) {
  // Handed over before anything is written (cerr is unbuffered): a returned hand-over failed.
  const error failed = hand_over();
  std::cerr << "leap init-model: error: " << failed.message << "\n";
  return 1;
}

result<served_model> serve_model(const std::string& /*model_dir*/, const std::string& /*device*/,
                                 const std::string& /*dtype*/) {
  return hand_over();
}

}  // namespace leap::cli::torch

// The real stderr read back: fd 2 points at a private file while a captured_stderr lives, so a
// test sees exactly what the program's log (common/log.hpp, spdlog on stderr) wrote. Used by the
// log tests of common/ (tests/common/log_test.cpp) and actors/ (tests/actors/log_sink_test.cpp).
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <unistd.h>

namespace leap::testing {

// Points fd 2 at a file while alive; text() restores fd 2 and returns what was written to it.
class captured_stderr {
 public:
  captured_stderr() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("leap_captured_stderr_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++) + ".txt");
    std::fflush(stderr);
    saved_ = ::dup(2);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  ~captured_stderr() {
    restore();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  captured_stderr(const captured_stderr&) = delete;
  captured_stderr& operator=(const captured_stderr&) = delete;

  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void restore() {
    if (saved_ < 0) {
      return;
    }
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

  std::filesystem::path path_;
  int saved_ = -1;
};

}  // namespace leap::testing

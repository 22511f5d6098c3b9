// A stand-in for Nsight Compute's ncu in the real sandbox (engine_profile_test.cpp,
// kernelbench_profile_test.cpp): a shell script in a folder the sandbox's uids may read, which
// finds ncu's --log-file argument ($log) and its own folder ($here, holding capture.csv: the H200
// capture of tests/sandbox/profile) and then runs the test's `body`.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace leap::sandbox::testing {

class stand_in_ncu {
 public:
  explicit stand_in_ncu(const std::string& body)
      : dir_(root() / ("leap-ncu-stand-in-" + std::to_string(::getpid()) + "-" +
                       std::to_string(next_number()))) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      why_not_ = dir_.string() + ": " + ec.message();
      return;
    }
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    fs::copy_file(fs::path(LEAP_SOURCE_DIR) / "tests" / "sandbox" / "profile" / "ncu_raw_h200.csv",
                  dir_ / "capture.csv", fs::copy_options::overwrite_existing);
    fs::permissions(dir_ / "capture.csv", fs::perms::owner_read | fs::perms::owner_write |
                                              fs::perms::group_read | fs::perms::others_read);
    std::ofstream(dir_ / "ncu") << "#!/bin/sh\n"
                                   "here=$(dirname \"$0\")\n"
                                   "for a in \"$@\"; do\n"
                                   "  if [ \"$prev\" = --log-file ]; then log=$a; fi\n"
                                   "  prev=$a\n"
                                   "done\n"
                                << body;
    fs::permissions(dir_ / "ncu", fs::perms::owner_all | fs::perms::group_read |
                                      fs::perms::group_exec | fs::perms::others_read |
                                      fs::perms::others_exec);
  }
  ~stand_in_ncu() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  stand_in_ncu(const stand_in_ncu&) = delete;
  stand_in_ncu& operator=(const stand_in_ncu&) = delete;
  [[nodiscard]] std::string path() const { return (dir_ / "ncu").string(); }
  // Empty when the stand-in is in place; else why not (a folder this user may not write).
  [[nodiscard]] const std::string& why_not() const { return why_not_; }

 private:
  // Beside the test binary, unless that is in a folder the sandbox replaces with its own (/tmp,
  // where a fresh clone may well be built): then in /usr/local/lib, which it binds read-only.
  static std::filesystem::path root() {
    auto beside = std::filesystem::canonical("/proc/self/exe").parent_path();
    for (const char* mine : {"/tmp/", "/var/tmp/", "/run/", "/dev/"}) {
      if (beside.string().rfind(mine, 0) == 0) {
        return "/usr/local/lib";
      }
    }
    return beside;
  }
  static int next_number() {
    static int next = 0;
    return next++;
  }
  std::filesystem::path dir_;
  std::string why_not_;
};

}  // namespace leap::sandbox::testing

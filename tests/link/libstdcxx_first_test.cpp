// Every binary binds libstdc++'s symbols to libstdc++, even when a library before it on the link
// line exports copies (pip's LibTorch does: `leap run` crashed in std::filesystem::remove_all that
// way). The top CMakeLists.txt names libstdc++ as every target's first library, which puts it first
// in the NEEDED list; this binary is linked like `leap` is, against a library that shadows
// remove_all.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

extern "C" int leap_libstdcxx_shadow_marker();

TEST(LinkOrder, LibstdcxxSymbolsBindToLibstdcxx) {
  ASSERT_EQ(leap_libstdcxx_shadow_marker(), 7);  // the shadowing library is loaded
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("leap-link-order-" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "file") << "x";
  // libstdc++'s remove_all removes 3 entries; the shadow's returns 424242 and removes nothing.
  EXPECT_EQ(fs::remove_all(dir), 3U);
  EXPECT_FALSE(fs::exists(dir));
}

// What the dynamic linker searches first: the first NEEDED entry of this binary. Ubuntu's
// toolchain ignored the earlier link flag (-lstdc++ in --push-state) and put libsnappy there; the
// remove_all check above cannot see that when the shadowing library itself comes late.
TEST(LinkOrder, LibstdcxxIsTheFirstNeededLibrary) {
  // /proc/PID/exe of this process (in the shell popen starts, /proc/self would be readelf itself).
  const std::string command = "readelf -d /proc/" + std::to_string(::getpid()) + "/exe";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  ASSERT_TRUE(pipe) << "cannot run readelf";
  std::string first;
  std::array<char, 512> line{};
  while (std::fgets(line.data(), line.size(), pipe.get()) != nullptr) {
    const std::string text = line.data();
    if (text.find("(NEEDED)") != std::string::npos) {
      first = text;
      break;
    }
  }
  EXPECT_NE(first.find("[libstdc++.so.6]"), std::string::npos) << first;
}

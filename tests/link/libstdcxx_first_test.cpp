// Every binary binds libstdc++'s symbols to libstdc++, even when a library before it on the link
// line exports copies (pip's LibTorch does: `leap run` crashed in std::filesystem::remove_all that
// way). The link option in the top CMakeLists.txt puts libstdc++ first in the NEEDED list; this
// binary is linked like `leap` is, against a library that shadows remove_all.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

extern "C" int leap_libstdcxx_shadow_marker();

TEST(LinkOrder, LibstdcxxSymbolsBindToLibstdcxx) {
  ASSERT_EQ(leap_libstdcxx_shadow_marker(), 7);  // the shadowing library is loaded
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("leap-link-order-" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "file") << "x";
  // libstdc++'s remove_all removes 3 entries; the shadow's returns 424242 and removes nothing.
  EXPECT_EQ(fs::remove_all(dir), 3U);
  EXPECT_FALSE(fs::exists(dir));
}

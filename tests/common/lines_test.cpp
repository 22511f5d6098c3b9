#include "common/lines.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

TEST(SplitLines, CasesByTable) {
  struct test_case {
    std::string text;
    std::vector<std::string> lines;
  };
  const std::vector<test_case> cases = {
      {"", {}},
      {"\n", {""}},
      {"one", {"one"}},
      {"one\n", {"one"}},
      {"one\ntwo", {"one", "two"}},
      {"one\n\ntwo\n", {"one", "", "two"}},
      {"one\r\ntwo\r\n", {"one", "two"}},  // Windows line ends
      {"a\rb\n", {"a\rb"}},                // only a '\r' that ends a line goes
      {"one\n\n", {"one", ""}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(split_lines(c.text), c.lines) << "text: '" << c.text << "'";
  }
}

}  // namespace
}  // namespace leap

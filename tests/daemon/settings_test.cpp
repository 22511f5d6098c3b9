// daemon.yaml parsing: defaults, values, and errors that name file, line and key.
#include "tools/daemon/settings.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap::daemon {
namespace {

TEST(DaemonSettings, EmptyFileGivesTheDefaults) {
  auto s = parse_settings("", "daemon.yaml");
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, daemon_settings{});
  EXPECT_EQ(s->port, 7433);
  EXPECT_EQ(s->max_concurrent, 1);
  EXPECT_EQ(s->grace_period_s, 30.0);
  EXPECT_EQ(s->max_connections, 0);  // the API's worker count
}

TEST(DaemonSettings, ReadsEveryKey) {
  auto s = parse_settings("port: 0\nmax_concurrent: 3\ngrace_period_s: 2.5\nmax_connections: 64\n",
                          "d.yaml");
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->port, 0);
  EXPECT_EQ(s->max_concurrent, 3);
  EXPECT_EQ(s->grace_period_s, 2.5);
  EXPECT_EQ(s->max_connections, 64);
}

TEST(DaemonSettings, ErrorsNameFileLineAndKey) {
  struct row {
    std::string yaml;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"max_concurrent: 0\n", "d.yaml:1: max_concurrent: expected an integer >= 1"},
      {"port: 8080\nmax_concurent: 2\n", "d.yaml:2: max_concurent: unknown key"},
      {"port: 70000\n", "d.yaml:1: port: expected an integer in [0, 65535]"},
      {"port: \"80\"\n", "d.yaml:1: port: expected an integer"},
      {"\n\ngrace_period_s: -1\n", "d.yaml:3: grace_period_s: expected a number > 0"},
      {"grace_period_s: [1]\n", "d.yaml:1: grace_period_s:"},
      {"max_concurrent: two\n", "d.yaml:1: max_concurrent:"},
      {"max_connections: -1\n", "d.yaml:1: max_connections: expected an integer >= 0"},
      {"- 1\n", "d.yaml:1: expected a mapping"},
      {"port: [1\n", "d.yaml:"},
  };
  for (const auto& r : rows) {
    auto s = parse_settings(r.yaml, "d.yaml");
    ASSERT_FALSE(s) << r.yaml;
    EXPECT_NE(s.err().message.find(r.expected), std::string::npos)
        << r.yaml << " -> " << s.err().message;
  }
  // Every problem is reported, one per line.
  auto two = parse_settings("port: -1\nmax_concurrent: 0\n", "d.yaml");
  ASSERT_FALSE(two);
  EXPECT_NE(two.err().message.find("d.yaml:1: port"), std::string::npos);
  EXPECT_NE(two.err().message.find("\nd.yaml:2: max_concurrent"), std::string::npos);
}

TEST(DaemonSettings, MissingFileGivesTheDefaults) {
  auto s = load_settings("/nonexistent-leap-dir/daemon.yaml");
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, daemon_settings{});
}

}  // namespace
}  // namespace leap::daemon

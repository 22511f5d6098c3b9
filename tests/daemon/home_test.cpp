// The daemon's home: token file (mode 0600, reused, refused when others may read it), atomic
// state files, records that survive a reload, log tails.
#include "tools/daemon/home.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace leap::daemon {
namespace {
namespace fs = std::filesystem;

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class HomeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = fs::temp_directory_path() /
            ("leap-daemon-home-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
    fs::create_directories(home_);
  }
  void TearDown() override { fs::remove_all(home_); }
  fs::path home_;
};

TEST_F(HomeTest, TokenIsCreatedPrivateAndReused) {
  auto token = ensure_token(home_);
  ASSERT_TRUE(token) << token.err().message;
  EXPECT_EQ(token->size(), 64u);
  EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((home_ / "token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(*ensure_token(home_), *token);
  EXPECT_EQ(*read_token(home_), *token);
  // Another home gets another token.
  fs::create_directories(home_ / "other");
  EXPECT_NE(*ensure_token(home_ / "other"), *token);

  ::chmod((home_ / "token").c_str(), 0644);
  auto refused = ensure_token(home_);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message.find("mode 644"), std::string::npos) << refused.err().message;
}

TEST_F(HomeTest, MissingTokenIsAClearError) {
  auto t = read_token(home_);
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("no token"), std::string::npos);
}

TEST_F(HomeTest, RecordsSurviveAndBadFilesAreReportedNotFatal) {
  experiment_record r;
  r.seq = 1;
  r.id = "e1";
  r.name = "a";
  r.state = experiment_state::running;
  r.pid = 12;
  r.run_dir = "/x";
  ASSERT_TRUE(save_record(home_, r));
  r.state = experiment_state::succeeded;  // replaced, not appended
  ASSERT_TRUE(save_record(home_, r));
  experiment_record q = r;
  q.seq = 2;
  q.id = "e2";
  ASSERT_TRUE(save_record(home_, q));
  fs::create_directories(experiments_dir(home_) / "e3");
  std::ofstream(experiments_dir(home_) / "e3" / "state.json") << "{ not json";
  fs::create_directories(experiments_dir(home_) / "e4");  // no state file: ignored

  auto loaded = load_records(home_);
  ASSERT_EQ(loaded.records.size(), 2u);
  for (const auto& rec : loaded.records) {
    EXPECT_EQ(rec.id == "e1" ? r : q, rec);
  }
  ASSERT_EQ(loaded.problems.size(), 1u);
  EXPECT_NE(loaded.problems[0].find("e3/state.json: not valid JSON"), std::string::npos);
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(experiments_dir(home_) / "e1")) {
    EXPECT_EQ(e.path().filename(), "state.json");
  }
}

TEST_F(HomeTest, ReadTailStartsAtALine) {
  std::ofstream(home_ / "log") << "first line\nsecond\nthird\n";
  EXPECT_EQ(read_tail(home_ / "log", 1000), "first line\nsecond\nthird\n");
  EXPECT_EQ(read_tail(home_ / "log", 10), "third\n");
  EXPECT_EQ(read_tail(home_ / "missing", 10), "");
}

TEST(DaemonHome, ResolvesFlagThenEnvironment) {
  const char* saved = std::getenv("HOME");
  const std::string home_before = saved ? saved : "";
  EXPECT_EQ(*resolve_home("/a/b/../c"), fs::path("/a/c"));
  ::setenv("LEAP_HOME", "/from/env", 1);
  EXPECT_EQ(*resolve_home(""), fs::path("/from/env"));
  ::unsetenv("LEAP_HOME");
  ::setenv("XDG_STATE_HOME", "/xdg", 1);
  EXPECT_EQ(*resolve_home(""), fs::path("/xdg/leap"));
  ::unsetenv("XDG_STATE_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(*resolve_home(""), fs::path("/home/u/.local/state/leap"));
  if (saved) {
    ::setenv("HOME", home_before.c_str(), 1);
  }
}

}  // namespace
}  // namespace leap::daemon

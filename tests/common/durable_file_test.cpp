// common/durable_file: the bytes and mode written, the old file kept and no temporary left when a
// write fails, the free space named on a full disk (a real 1 MiB tmpfs, mounted in a private
// mount namespace: root only, else skipped), killed writers' temporaries removed, concurrent
// writers of one target, a no-clobber creation. The fsyncs themselves cannot be observed without
// cutting the power: these tests check everything around them, not that the data reached the disk.
#include "common/durable_file.hpp"

#include "tests/storage/small_disk.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class DurableFile : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> count{0};
    root_ = fs::temp_directory_path() /
            ("leap-durable-file-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  static std::string read(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // The names in `folder` other than `keep`: what a write left behind.
  static std::vector<std::string> others(const fs::path& folder, const std::string& keep) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().filename() != keep) {
        names.push_back(entry.path().filename().string());
      }
    }
    return names;
  }

  fs::path root_;
};

TEST_F(DurableFile, WritesTheConcatenatedPartsWithTheMode) {
  const std::string big(3U << 20U, 'b');
  const std::string_view parts[] = {"head|", "", big, "|tail"};
  ASSERT_TRUE(write_file_durably(path("token"), parts, 0600));
  EXPECT_EQ(read(path("token")), "head|" + big + "|tail");
  struct stat st {};
  ASSERT_EQ(::stat(path("token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_TRUE(others(root_, "token").empty());
}

TEST_F(DurableFile, ReplacesAnExistingFile) {
  ASSERT_TRUE(write_file_durably(path("state.json"), std::string_view("first, and longer\n")));
  ASSERT_TRUE(write_file_durably(path("state.json"), std::string_view("second\n")));
  EXPECT_EQ(read(path("state.json")), "second\n");
  EXPECT_TRUE(others(root_, "state.json").empty());
}

// Unsynced skips only the syncs (not observable here): the file is still replaced whole.
TEST_F(DurableFile, UnsyncedStillReplacesTheFileWhole) {
  ASSERT_TRUE(write_file_durably(path("model.safetensors"), std::string_view("old"), 0644,
                                 durability::unsynced));
  const std::string_view parts[] = {"new ", "weights"};
  ASSERT_TRUE(write_file_durably(path("model.safetensors"), parts, 0644, durability::unsynced));
  EXPECT_EQ(read(path("model.safetensors")), "new weights");
  EXPECT_TRUE(others(root_, "model.safetensors").empty());
}

TEST_F(DurableFile, AFailedReplaceKeepsTheOldEntryNamesTheTargetAndLeavesNoTemporary) {
  // The target is a folder with a file in it: the temporary is written, the rename fails.
  fs::create_directories(root_ / "model.safetensors");
  std::ofstream(root_ / "model.safetensors" / "inside") << "kept";
  const auto s = write_file_durably(path("model.safetensors"), std::string_view("new bytes"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr(path("model.safetensors") + ": cannot replace it with"));
  EXPECT_EQ(read(root_ / "model.safetensors" / "inside"), "kept");
  EXPECT_TRUE(others(root_, "model.safetensors").empty());
}

TEST_F(DurableFile, AMissingFolderIsAnErrorNamingTheTarget) {
  const auto s = write_file_durably(path("missing/config.json"), std::string_view("{}"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message,
              HasSubstr(path("missing/config.json") + ": cannot create its temporary file"));
  EXPECT_THAT(s.err().message, HasSubstr("No such file or directory"));
}

// A failing write without root (moved from the telemetry tests): a file size limit in a child
// process, with SIGXFSZ ignored so that write(2) fails with EFBIG.
TEST_F(DurableFile, AFailedWriteNamesTheReasonAndLeavesNoTemporary) {
  ASSERT_TRUE(write_file_durably(path("metrics.prom"), std::string_view("old\n")));
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const auto written =
        write_file_durably(path("metrics.prom"), std::string(std::size_t{64} * 1024, 'x'));
    const bool named = !written && written.err().message.find(path("metrics.prom") +
                                                              ": cannot write: File too large") !=
                                       std::string::npos;
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write did not fail naming the file and the reason";
  EXPECT_EQ(read(path("metrics.prom")), "old\n");
  EXPECT_TRUE(others(root_, "metrics.prom").empty());
}

TEST_F(DurableFile, AWriterDroppedWithoutCommitLeavesNothing) {
  ASSERT_TRUE(write_file_durably(path("export.jsonl"), std::string_view("old\n")));
  {
    auto writer = durable_writer::open(path("export.jsonl"));
    ASSERT_TRUE(writer);
    ASSERT_TRUE(writer->write("half of an export"));
    EXPECT_EQ(writer->size(), 17U);
  }
  EXPECT_EQ(read(path("export.jsonl")), "old\n");
  EXPECT_TRUE(others(root_, "export.jsonl").empty());
}

TEST_F(DurableFile, AKilledWritersTemporariesAreRemovedALiveOnesAreKept) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child);
  const std::string live = std::to_string(::getpid());
  for (const auto& name : {"metrics.prom.tmp." + dead, "metrics.prom.tmp." + dead + ".7",
                           "metrics.prom.tmp." + live + ".900000",
                           std::string("metrics.prom.tmp.x1"), "other.tmp." + dead}) {
    std::ofstream(root_ / name) << "torn";
  }
  ASSERT_TRUE(write_file_durably(path("metrics.prom"), std::string_view("m 1\n")));
  auto left = others(root_, "metrics.prom");
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"metrics.prom.tmp." + live + ".900000",
                                            "metrics.prom.tmp.x1", "other.tmp." + dead}));
}

TEST_F(DurableFile, ConcurrentWritersOfOneTargetLeaveOneWholeFile) {
  // Threads of one process: each has a temporary of its own (the old per-process name was shared,
  // so one writer's rename took another's half-written file or failed).
  constexpr int writers = 6;
  std::vector<std::string> contents;
  contents.reserve(writers);
  for (int i = 0; i < writers; ++i) {
    contents.emplace_back(std::size_t{256} * 1024, static_cast<char>('a' + i));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(writers);
  for (int i = 0; i < writers; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 10; ++round) {
        if (!write_file_durably(path("metrics.json"), std::string_view(contents[i]))) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  const std::string final_text = read(path("metrics.json"));
  EXPECT_NE(std::find(contents.begin(), contents.end(), final_text), contents.end())
      << "a torn file of " << final_text.size() << " bytes";
  EXPECT_TRUE(others(root_, "metrics.json").empty());
}

TEST_F(DurableFile, CreateNeverReplacesAndOneOfManyCreatorsWins) {
  auto first = create_file_durably(path("token"), "first\n", 0600);
  ASSERT_TRUE(first) << first.err().message;
  EXPECT_TRUE(*first);
  auto second = create_file_durably(path("token"), "second\n", 0600);
  ASSERT_TRUE(second) << second.err().message;
  EXPECT_FALSE(*second);
  EXPECT_EQ(read(path("token")), "first\n");
  EXPECT_TRUE(others(root_, "token").empty());

  constexpr int creators = 8;
  std::atomic<int> created{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  threads.reserve(creators);
  for (int i = 0; i < creators; ++i) {
    threads.emplace_back([&, i] {
      auto made = create_file_durably(path("raced"), std::to_string(i) + "\n");
      if (!made) {
        ++errors;
      } else if (*made) {
        ++created;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(created.load(), 1);
  EXPECT_THAT(read(path("raced")), ::testing::MatchesRegex("[0-7]\n"));
  EXPECT_EQ(others(root_, "raced"), std::vector<std::string>{"token"});
}

TEST_F(DurableFile, RenameDurablyMovesAFolderAndNamesBothPathsOnError) {
  fs::create_directories(root_ / "step-1.tmp");
  std::ofstream(root_ / "step-1.tmp" / "model.safetensors") << "weights";
  ASSERT_TRUE(rename_durably(path("step-1.tmp"), path("step-1")));
  EXPECT_EQ(read(root_ / "step-1" / "model.safetensors"), "weights");
  EXPECT_FALSE(fs::exists(root_ / "step-1.tmp"));
  const auto s = rename_durably(path("gone"), path("there"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr("'" + path("gone") + "' to '" + path("there") + "'"));
}

TEST(FormatBytes, TwoOrThreeDigitsInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1), "1 byte");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(256ULL << 20), "256 MiB");
  EXPECT_EQ(format_bytes(100ULL << 20 | 1000), "100 MiB");  // no decimal from 100 up
  EXPECT_EQ(format_bytes(30 * (63ULL << 20) + 4096), "1.8 GiB");
  EXPECT_EQ(format_bytes(3ULL << 40), "3 TiB");
  EXPECT_EQ(format_bytes(5000ULL << 40), "5000 TiB");
}

TEST_F(DurableFile, DescribeFreeSpaceInHumanUnits) {
  const std::regex line(
      R"(^([0-9]+ bytes?|[0-9]+(\.[0-9])? (KiB|MiB|GiB|TiB)) free of ([0-9]+ bytes?|[0-9]+(\.[0-9])? (KiB|MiB|GiB|TiB)) on its filesystem$)");
  const std::string text = describe_free_space(root_.string());
  EXPECT_TRUE(std::regex_match(text, line)) << text;
  EXPECT_EQ(describe_free_space(path("missing")),
            "its free space is unknown (statvfs: No such file or directory)");
}

TEST_F(DurableFile, AFullDiskKeepsTheOldFileAndTheErrorSaysTheFreeSpace) {
  test::small_disk disk(root_, 1U << 20U);
  if (!disk.skip_reason().empty()) {
    GTEST_SKIP() << disk.skip_reason();
  }
  const std::string target = (disk / "model.safetensors").string();
  ASSERT_TRUE(write_file_durably(target, std::string_view("old weights")));
  disk.fill();
  const std::string big(std::size_t{256} * 1024, 'w');
  const std::string_view parts[] = {"header", big};
  const auto s = write_file_durably(target, parts);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr(target + ": cannot write: No space left on device"));
  EXPECT_THAT(s.err().message, HasSubstr("; its folder has "));
  EXPECT_THAT(s.err().message, HasSubstr(" free of 1 MiB on its filesystem"));
  EXPECT_EQ(read(target), "old weights");
  for (const auto& entry : fs::directory_iterator(disk / "")) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "model.safetensors" || name.rfind("filler-", 0) == 0) << name;
  }
  // Once space is freed, the same write goes through.
  disk.free_space();
  ASSERT_TRUE(write_file_durably(target, parts));
  EXPECT_EQ(read(target).size(), 6 + big.size());
}

}  // namespace
}  // namespace leap

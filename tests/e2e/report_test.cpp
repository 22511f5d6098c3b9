// `leap report` end to end: three small real runs (`leap run` with the embedded scripted policy and
// the real sandbox; two seeds of one config as one `leap run --seeds` launch, and one run of
// another), one report over them, and the page rendered in headless Chromium: every chart canvas
// must have drawn (the bottleneck charts from profiles put into one run's store), the seeds' group
// its +/- one standard deviation band, no script error may be recorded, and the page may load
// nothing from the network. Every process is bounded by a timeout.
#include "e2e_support.hpp"
#include "storage/trajectory_store.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_shell;
using leap::e2e::quoted;
using leap::e2e::read_file;
using leap::e2e::shell;

// Debian's chromium, or another Chromium on PATH; nullopt when there is none.
std::optional<std::string> find_chromium() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) {
    return std::nullopt;
  }
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const fs::path candidate = fs::path(dir) / name;
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) {
        return candidate.string();
      }
    }
  }
  return std::nullopt;
}

// Three finished runs in a private folder, made once for the tests of this file.
// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class ReportE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ =
        new fs::path(fs::temp_directory_path() / ("leap-e2e-report-" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    const fs::path suite = fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
    // One cpp task (compile times) and python tasks (quick); one of them held out for validation.
    for (const char* task : {"cpp/axpby", "python/flatten", "python/two_sum"}) {
      fs::create_directories(*root_ / "suite" / task);
      fs::copy(suite / task, *root_ / "suite" / task, fs::copy_options::recursive);
    }
    struct run_spec {
      std::string dir;
      std::string name;
      std::string gate;
      std::string seeds;  // --seeds, or "" for one run
    };
    // Two seeds of a DCP config with probes (one launch), and a config that debugs every failure.
    const std::vector<run_spec> specs = {
        {"dcp", "dcp",
         "  policy: dcp\n  unit: fraction\n  tau_min: 0.5\n  tau_max: 1.0\n"
         "  probe_fraction: 1.0\n",
         "1-2"},
        {"full_1", "full", "  policy: full\n", ""},
    };
    for (const auto& s : specs) {
      const fs::path config = *root_ / (s.dir + ".yaml");
      std::ofstream(config) << "experiment:\n  name: " << s.name << "\n  seed: 1"
                            << "\n  run_dir: " << (*root_ / s.dir).string() << "\n  steps: 2\n"
                            << "data:\n  train: " << (*root_ / "suite").string()
                            << "\n  validation_fraction: 0.34\n  batch_size: 2\n"
                            << "rollout:\n  group_size: 4\n  max_turns: 2\n  validation:\n"
                            << "    every: 1\n    n: 2\n"
                            << "gate:\n"
                            << s.gate << "learner:\n  kind: record\n"
                            << "policy:\n  flavour: embedded\n  max_in_flight: 8\n"
                            << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
      const std::string args =
          "run " + quoted(config.string()) + (s.seeds.empty() ? "" : " --seeds " + s.seeds);
      const auto run = leap_shell(args, 300);
      ASSERT_EQ(run.exit_code, 0) << run.text;
      if (s.seeds.empty()) {
        continue;
      }
      // Each seed in its folder, its lines named; a summary of the launch.
      for (const char* seed : {"1", "2"}) {
        const std::string folder = (*root_ / s.dir / (std::string("seed-") + seed)).string();
        EXPECT_NE(run.text.find(std::string("seed ") + seed + " (" + seed + " of 2): " + folder),
                  std::string::npos)
            << run.text;
        EXPECT_NE(run.text.find(std::string("[seed ") + seed + "] step 2/2"), std::string::npos)
            << run.text;
      }
      EXPECT_NE(run.text.find("seeds of 'dcp': 2 finished, 0 finished before, 0 failed"),
                std::string::npos)
          << run.text;
      // The same launch again skips the finished seeds.
      const auto again = leap_shell(args, 120);
      ASSERT_EQ(again.exit_code, 0) << again.text;
      EXPECT_NE(again.text.find("seed 2 (2 of 2): " + (*root_ / s.dir / "seed-2").string() +
                                " holds it finished; skipped"),
                std::string::npos)
          << again.text;
      EXPECT_NE(again.text.find("seeds of 'dcp': 0 finished, 2 finished before, 0 failed"),
                std::string::npos)
          << again.text;
      EXPECT_EQ(again.text.find("] step "), std::string::npos) << again.text;
    }
    // No GPU profiles here: the profiles a run with verifier.profile stores with its turns
    // (issue 34) are put into full's store as that run would have, so the bottleneck charts draw.
    auto store = leap::trajectory_store::open(*root_ / "full_1" / "trajectories");
    ASSERT_TRUE(store.ok()) << store.err().message;
    for (std::uint64_t step = 0; step < 2; ++step) {
      leap::turn_profile_record p;
      p.turn = leap::turn_ref{"full", step, leap::split_kind::train, 0, 0, 0};
      p.kernels.push_back({"axpby", 2000.0, step == 0 ? "memory-bound" : "latency-bound", {}});
      p.kernels.push_back({"tiny", 900.0, "launch-bound", {"launch_overhead"}});
      p.seconds = 3.0 + static_cast<double>(step);
      ASSERT_TRUE((*store)->put_profile(p).ok());
    }
    ASSERT_TRUE((*store)->close().ok());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
    root_ = nullptr;
  }
  static fs::path dir(const std::string& name) { return *root_ / name; }

  // NOLINTNEXTLINE(readability-identifier-naming): a member, named as members are.
  static inline fs::path* root_ = nullptr;
};

TEST_F(ReportE2E, EveryChartDrawsInHeadlessChromiumAndLabelsRegroup) {
  const fs::path page = dir("report.html");
  // The seeds launch's folder stands for its seed folders.
  const auto report =
      leap_shell("report " + quoted(dir("dcp").string()) + " " + quoted(dir("full_1").string()) +
                     " --out " + quoted(page.string()),
                 120);
  ASSERT_EQ(report.exit_code, 0) << report.text;
  // Progress: a line per run read; the summary names the charts and the groups.
  EXPECT_NE(report.text.find("leap report: read " + dir("dcp/seed-2").string() + ": run 'dcp'"),
            std::string::npos)
      << report.text;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report.text, m,
                                std::regex(R"(wrote .*: (\d+) charts, 3 runs in 2 groups)")))
      << report.text;
  const int charts = std::stoi(m[1]);
  // Accuracy vs time and vs step, validation, activated, recovery, bottleneck classes, profiling
  // time, composition, step time, latency.
  EXPECT_EQ(charts, 10) << report.text;

  const std::string html = read_file(page);
  ASSERT_FALSE(html.empty());
  // Self-contained: nothing is loaded from anywhere. The only URLs in the file are in the
  // embedded library's license banners (/*! ... */), which load nothing.
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  std::string without_banners = html;
  for (auto at = without_banners.find("/*!"); at != std::string::npos;
       at = without_banners.find("/*!", at)) {
    const auto end = without_banners.find("*/", at);
    ASSERT_NE(end, std::string::npos);
    without_banners.erase(at, end + 2 - at);
  }
  EXPECT_EQ(without_banners.find("http://"), std::string::npos);
  EXPECT_EQ(without_banners.find("https://"), std::string::npos);
  // The runs and their groups are in the table; the band is one standard deviation.
  EXPECT_NE(html.find(dir("full_1").string()), std::string::npos);
  EXPECT_NE(html.find(dir("dcp/seed-2").string()), std::string::npos);
  EXPECT_NE(html.find("\"band\":\"std\""), std::string::npos);
  EXPECT_NE(html.find("the shaded band +/- one standard deviation"), std::string::npos);

  // Labels regroup the folders and name the lines; a label is a run string like any other.
  {
    const fs::path labelled = dir("labelled.html");
    const auto relabelled = leap_shell(
        "report --label " + quoted("seed one=" + dir("dcp/seed-1").string()) + " --label " +
            quoted("<all>=" + dir("dcp/seed-2").string()) + " --label " +
            quoted("<all>=" + dir("full_1").string()) + " -o " + quoted(labelled.string()),
        120);
    ASSERT_EQ(relabelled.exit_code, 0) << relabelled.text;
    EXPECT_NE(relabelled.text.find("3 runs in 2 groups"), std::string::npos) << relabelled.text;
    const std::string labelled_html = read_file(labelled);
    EXPECT_NE(labelled_html.find("seed one"), std::string::npos);
    // Escaped in the page, \u-escaped in the data.
    EXPECT_NE(labelled_html.find("&lt;all&gt;"), std::string::npos);
    EXPECT_EQ(labelled_html.find("<all>"), std::string::npos);
    EXPECT_NE(labelled_html.find("\\u003call\\u003e pass@1"), std::string::npos);
  }

  // An output path that cannot be written is named.
  const auto unwritable = leap_shell("report " + quoted(dir("dcp/seed-1").string()) + " --out " +
                                         quoted(dir("no/such/folder/x.html").string()),
                                     60);
  EXPECT_EQ(unwritable.exit_code, 1) << unwritable.text;
  EXPECT_NE(unwritable.text.find("leap report: error: " + dir("no/such/folder/x.html").string() +
                                 ": cannot create its temporary file"),
            std::string::npos)
      << unwritable.text;

  const auto chromium = find_chromium();
  if (!chromium) {
    std::printf(
        "SKIPPED: no chromium binary on PATH (apt-get install chromium); the page was "
        "written but not rendered\n");
    GTEST_SKIP() << "no chromium binary on PATH";
  }
  // Root in CI: Chromium needs --no-sandbox there. A private profile folder keeps parallel runs
  // apart and writes nothing to $HOME.
  const auto dom =
      shell(quoted(*chromium) + " --headless --no-sandbox --disable-gpu " +
                "--no-first-run --user-data-dir=" + quoted(dir("chromium").string()) +
                " --virtual-time-budget=5000 --dump-dom " + quoted("file://" + page.string()),
            120, /*with_stderr=*/false);
  ASSERT_EQ(dom.exit_code, 0) << dom.text;
  int canvases = 0;
  int drawn = 0;
  const std::regex canvas(R"(<canvas[^>]*>)");
  for (std::sregex_iterator it(dom.text.begin(), dom.text.end(), canvas), end; it != end; ++it) {
    ++canvases;
    const std::string tag = it->str();
    if (tag.find("data-drawn=\"1\"") != std::string::npos) {
      ++drawn;
    } else {
      ADD_FAILURE() << "chart did not draw: " << tag;
    }
  }
  EXPECT_EQ(canvases, charts);
  EXPECT_EQ(drawn, charts);
  // The seeds' group draws its band on the per-step accuracy chart (the single run draws none).
  std::smatch accuracy;
  ASSERT_TRUE(std::regex_search(dom.text, accuracy,
                                std::regex(R"(<canvas[^>]*id="chart-accuracy_step"[^>]*>)")))
      << dom.text.substr(0, 4000);
  // Two lines (pass@1, pass@2) of the dcp group, each with its band.
  EXPECT_NE(accuracy.str().find("data-bands=\"2\""), std::string::npos) << accuracy.str();
  EXPECT_EQ(dom.text.find("class=\"script-error\""), std::string::npos) << dom.text.substr(0, 4000);
  // An error before the page's error list exists is recorded on the <html> element instead.
  EXPECT_FALSE(std::regex_search(dom.text, std::regex(R"(<html[^>]*data-script-error)")));
}

// Errors need no run: a private folder that is not a run folder is enough.
TEST(ReportErrorsE2E, NameThePath) {
  const fs::path root =
      fs::temp_directory_path() / ("leap-e2e-report-errors-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "not_a_run");
  const fs::path out = root / "x.html";
  struct row {
    std::string args;
    std::string expected;
  };
  const std::vector<row> rows = {
      {quoted((root / "not_a_run").string()) + " --out " + quoted(out.string()),
       (root / "not_a_run").string() + ": not a run folder"},
      {quoted((root / "missing").string()) + " --out " + quoted(out.string()),
       (root / "missing").string() + ": not a run folder"},
      {"--label nolabel --out " + quoted(out.string()), "expected NAME=RUN_DIR"},
      {"--out " + quoted(out.string()), "no run folder given"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.args);
    const auto result = leap_shell("report " + r.args, 60);
    EXPECT_EQ(result.exit_code, 1) << result.text;
    EXPECT_NE(result.text.find("leap report: error: "), std::string::npos) << result.text;
    EXPECT_NE(result.text.find(r.expected), std::string::npos) << result.text;
  }
  EXPECT_FALSE(fs::exists(out));
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace

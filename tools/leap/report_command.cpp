// `leap report RUN... --out report.html`: one self-contained HTML page with the charts of one or
// more runs (accuracy vs wall-clock and vs step, validation accuracy, activated fraction, recovery
// and probe recovery, rollout composition by pass rate, step time by stage, verifier latency).
// Runs of the same experiment name (or --label) are overlaid as their mean with a band of +/- one
// standard deviation (--band min-max: their min and max). A folder of a `leap run --seeds` launch
// (no store of its own, seed-N folders) stands for its seeds. Chart.js is
// embedded in the binary, so neither the command nor the page needs anything from outside. Reads
// the stores only (it may run beside a live run).
#include "common/durable_file.hpp"
#include "storage/trajectory_store.hpp"
#include "tools/leap/command.hpp"
#include "tools/report/chartjs.hpp"
#include "tools/report/report.hpp"
#include "tools/report/report_data.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace leap::cli {
namespace {

namespace fs = std::filesystem;

struct report_command_options {
  std::vector<std::string> run_dirs;
  std::vector<std::string> labels;  // NAME=RUN_DIR
  std::string out;
  std::string title = "LEAP report";
  int buckets = 5;
  std::string band = "std";
};

int fail(const std::string& message) {
  std::cerr << "leap report: error: " << message << "\n";
  return 1;
}

// The same folder however it is spelled (runs/a, ./runs/a/, an absolute path).
std::string folder_key(const std::string& path) {
  std::error_code ec;
  auto canonical = fs::weakly_canonical(fs::path(path), ec);
  return ec ? fs::path(path).lexically_normal().string() : canonical.string();
}

// The seed-N folders of a `leap run --seeds` launch's folder, by seed; empty when `dir` holds a
// store of its own or no seed folder.
std::vector<std::string> seed_folders(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(store_path_of_run_dir(dir), ec)) {
    return {};
  }
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("seed-", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos ||
        !fs::exists(store_path_of_run_dir(it->path()), ec)) {
      continue;
    }
    found.emplace_back(std::stoull(name.substr(5)), it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  out.reserve(found.size());
  for (auto& [seed, path] : found) {
    out.push_back(std::move(path));
  }
  return out;
}

int run_report(const report_command_options& o) {
  // The folders in the order given: positional ones first, then those only named by --label; a
  // seeds launch's folder is its seed folders (a --label on it labels them all).
  std::vector<report::run_source> sources;
  std::set<std::string> seen;
  for (const auto& given : o.run_dirs) {
    auto seeds = seed_folders(given);
    if (seeds.empty()) {
      seeds.push_back(given);
    }
    for (const auto& dir : seeds) {
      if (seen.insert(folder_key(dir)).second) {
        sources.push_back({dir, ""});
      }
    }
  }
  for (const auto& spec : o.labels) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return fail("--label '" + spec + "': expected NAME=RUN_DIR");
    }
    const std::string name = spec.substr(0, eq);
    auto dirs = seed_folders(spec.substr(eq + 1));
    if (dirs.empty()) {
      dirs.push_back(spec.substr(eq + 1));
    }
    for (const auto& dir : dirs) {
      const auto key = folder_key(dir);
      auto it = std::find_if(sources.begin(), sources.end(), [&](const report::run_source& s) {
        return folder_key(s.run_dir) == key;
      });
      if (it == sources.end()) {
        seen.insert(key);
        sources.push_back({dir, name});
      } else {
        it->label = name;
      }
    }
  }
  if (sources.empty()) {
    return fail("no run folder given (RUN... or --label NAME=RUN_DIR)");
  }

  std::vector<report::run_input> runs;
  for (const auto& source : sources) {
    auto loaded = report::load_runs(
        source, static_cast<std::size_t>(o.buckets),
        [](const std::string& line) { std::cerr << "leap report: read " << line << "\n"; });
    if (!loaded) {
      return fail(loaded.err().message);
    }
    if (loaded->empty()) {
      std::cerr << "leap report: " << source.run_dir << ": the store holds no run; skipped\n";
    }
    for (auto& run : *loaded) {
      if (run.stored_groups == 0 && run.replay.steps.empty()) {
        std::cerr << "leap report: " << source.run_dir << ": run '" << run.run_id
                  << "' is empty (no stored group or step yet); skipped\n";
        continue;
      }
      runs.push_back(std::move(run));
    }
  }
  if (runs.empty()) {
    return fail("no run with stored data: nothing to report");
  }

  report::report_options options;
  options.title = o.title;
  options.band = o.band == "min-max" ? report::band_kind::min_max : report::band_kind::std_dev;
  const auto model = report::build_model(runs, options);
  const std::string html = report::render_html(model, report::chartjs_source());

  // Whole or not at all, and kept after a crash: never a partial page.
  if (auto written = write_file_durably(o.out, html); !written) {
    return fail(written.err().message);
  }

  std::set<std::string> groups;
  for (const auto& r : runs) {
    groups.insert(r.group);
  }
  std::printf("wrote %s: %zu charts, %zu runs in %zu groups, %.0f KiB\n", o.out.c_str(),
              model.charts.size(), runs.size(), groups.size(),
              static_cast<double>(html.size()) / 1024.0);
  for (const auto& note : model.notes) {
    std::printf("  %s\n", note.c_str());
  }
  return 0;
}

void add_report(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<report_command_options>();
  auto* cmd = app.add_subcommand(
      "report",
      "Write one self-contained HTML page with charts of one or more runs: training accuracy vs "
      "wall-clock time and vs step, validation accuracy, activated fraction, recovery and probe "
      "recovery, rollout composition by pass rate, step time by stage, verifier latency. Runs "
      "with the same experiment name (or --label) are drawn as one line: their mean with a "
      "band of +/- one standard deviation (or min-max, --band). The page embeds Chart.js and "
      "opens offline.");
  cmd->add_option("runs", o->run_dirs,
                  "Run folders (experiment.run_dir); the folder of a `leap run --seeds` launch "
                  "stands for its seed-N folders, which form one group");
  cmd->add_option("--out,-o", o->out, "The HTML file to write")->required();
  cmd->add_option("--label", o->labels,
                  "NAME=RUN_DIR: draw the folder's runs as group NAME (default: the config's "
                  "experiment.name); folders with the same NAME are overlaid. Repeatable; adds "
                  "RUN_DIR when it is not among RUN...");
  cmd->add_option("--band", o->band,
                  "What the band around a group's mean spans: std (mean +/- one sample standard "
                  "deviation over its runs, the default) or min-max")
      ->check(CLI::IsMember({"std", "min-max"}));
  cmd->add_option("--title", o->title, "The page's title (default: LEAP report)");
  cmd->add_option("--buckets", o->buckets, "Pass-rate buckets of the composition chart")
      ->check(CLI::Range(1, 100));
  cmd->callback([o, exit_code] { *exit_code = run_report(*o); });
}

}  // namespace

LEAP_COMMAND("report", add_report);

}  // namespace leap::cli

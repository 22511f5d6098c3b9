// `leap export RUN_DIR --format jsonl|csv --out FILE [--run ID]`: writes a run directory's stored
// trajectories as JSONL (one group per line) or CSV (one row per rollout turn) for tools outside
// LEAP. The store is opened read-only, so a run may still be writing to it.
#include "common/durable_file.hpp"
#include "storage/export.hpp"
#include "storage/trajectory_store.hpp"
#include "tools/leap/command.hpp"

#include <filesystem>
#include <iostream>
#include <memory>
#include <streambuf>
#include <string>
#include <system_error>
#include <vector>

namespace leap::cli {
namespace {

struct export_options {
  std::string run_dir;
  std::string format;
  std::string out;
  std::string run_id;
};

// The export's stream onto a durable_writer, buffered. A stream keeps no reason for a failed
// write: this keeps the writer's error for the message.
class file_buffer : public std::streambuf {
 public:
  explicit file_buffer(durable_writer& writer) : writer_(writer) { reset(); }

  // The first write error, or ok.
  [[nodiscard]] const status& failure() const { return failure_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) {
      return traits_type::eof();
    }
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  void reset() { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  bool drain() {
    if (failure_ && pptr() > pbase()) {
      failure_ = writer_.write({pbase(), static_cast<std::size_t>(pptr() - pbase())});
      reset();
    }
    return failure_.ok();
  }

  durable_writer& writer_;
  std::vector<char> buffer_ = std::vector<char>(std::size_t{1} << 16U);
  status failure_ = ok_status();
};

int fail(const std::string& message) {
  std::cerr << "leap export: error: " << message << "\n";
  return 1;
}

// RUN_DIR/trajectories, or RUN_DIR itself when it is a store folder.
result<std::filesystem::path> find_store(const std::filesystem::path& run_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    return error{run_dir.string() + ": no such directory"};
  }
  const auto nested = store_path_of_run_dir(run_dir);
  // A store folder without CURRENT goes to open(), which names the damage.
  if (std::filesystem::is_directory(nested, ec)) {
    return nested;
  }
  if (std::filesystem::exists(run_dir / "CURRENT", ec)) {
    return run_dir;
  }
  return error{run_dir.string() + ": no trajectory store (looked for " + nested.string() +
               "); is it a run directory?"};
}

std::string known_runs(const trajectory_store& store) {
  auto runs = store.runs();
  if (!runs || runs->empty()) {
    return "the store lists no runs";
  }
  std::string names;
  for (const auto& r : *runs) {
    names += (names.empty() ? "" : ", ") + r.id;
  }
  return "its runs: " + names;
}

result<export_counts> write_export(const trajectory_store& store, const export_options& options,
                                   std::ostream& out) {
  const export_query query{options.run_id};
  return options.format == "jsonl" ? export_jsonl(store, query, out)
                                   : export_csv(store, query, out);
}

int run_export(const export_options& options) {
  auto path = find_store(options.run_dir);
  if (!path) {
    return fail(path.err().message);
  }
  auto store = trajectory_store::open(*path, {.read_only = true, .accept_lost_writes = true});
  if (!store) {
    return fail(store.err().message);
  }
  if (const auto& lost = (*store)->lost_writes()) {
    std::cerr << "leap export: WARNING: " << path->string() << ": " << lost->describe()
              << ". The export holds what the store still has\n";
  }
  if (!options.run_id.empty()) {
    auto run = (*store)->get_run(options.run_id);
    if (!run) {
      return fail(run.err().message);
    }
    // A store may hold groups of a run without its run record: look for one group before failing.
    if (!*run) {
      group_query query;
      query.run_id = options.run_id;
      query.decode.tokens = false;
      bool found = false;
      const auto probe = (*store)->for_each_group(query, [&](group_record&&) -> status {
        found = true;
        return error{"found"};  // one is enough: stop the scan
      });
      if (!found) {
        if (!probe) {
          return fail(probe.err().message);
        }
        return fail("run '" + options.run_id + "' is not in " + path->string() + " (" +
                    known_runs(**store) + ")");
      }
    }
  }

  if (options.out == "-") {
    auto counts = write_export(**store, options, std::cout);
    if (!counts) {
      return fail("stdout: " + counts.err().message);
    }
    std::cerr << "exported " << counts->groups << " groups (" << counts->rows << " rows)\n";
    return 0;
  }

  // Written beside the target, synced and renamed at the end (common/durable_file.hpp), so that
  // FILE is never a partial export, even after a power loss. A failed export removes its
  // temporary; those of exports killed before (whose process is gone) are removed here.
  const std::string target = options.out;
  auto writer = durable_writer::open(target);
  if (!writer) {
    return fail(writer.err().message);
  }
  file_buffer buffer(*writer);
  std::ostream file(&buffer);
  const auto counts = write_export(**store, options, file);
  if (!buffer.failure()) {
    // The writer's error names the file, the step, the reason and, on a full disk, the free space.
    return fail(buffer.failure().err().message + " (after " + std::to_string(writer->size()) +
                " bytes of the export)");
  }
  if (!counts) {
    return fail(target + ": " + counts.err().message);
  }
  if (auto s = writer->commit(); !s) {
    return fail(s.err().message);
  }
  std::cout << "exported " << counts->groups << " groups (" << counts->rows << " rows) to "
            << target << "\n";
  return 0;
}

void add_export(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<export_options>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write a run directory's stored trajectories for tools outside LEAP: JSONL with one group "
      "per line (every field, token ids and log-probs included) or CSV with one row per rollout "
      "turn (token counts, verdicts, timings, rewards, feedback and text). Reads the store "
      "read-only, so it works while the run is still writing.");
  cmd->add_option("run_dir", options->run_dir,
                  "Run directory (its store is RUN_DIR/trajectories), or a store folder itself")
      ->required();
  cmd->add_option("--format", options->format, "Output format: jsonl or csv")
      ->required()
      ->check(CLI::IsMember({"jsonl", "csv"}));
  cmd->add_option("--out", options->out, "Output file; '-' writes to standard output")->required();
  cmd->add_option("--run", options->run_id, "Export only this run id (default: every run)");
  cmd->callback([options, exit_code] { *exit_code = run_export(*options); });
}

}  // namespace

LEAP_COMMAND("export", add_export);

}  // namespace leap::cli

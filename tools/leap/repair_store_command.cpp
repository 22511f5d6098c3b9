// `leap repair-store STORE COPY`: recovers a damaged trajectory store (one that lost its CURRENT
// file, say) into a copy with RocksDB's repair, leaving the damaged folder as it is
// (storage/trajectory_store.hpp, repair_store_copy).
#include "storage/trajectory_store.hpp"
#include "tools/leap/command.hpp"

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

namespace leap::cli {
namespace {

struct repair_options {
  std::string store;
  std::string copy;
};

int run_repair(const repair_options& options) {
  std::filesystem::path damaged = options.store;
  std::error_code ec;
  // A run folder names its store.
  if (std::filesystem::is_directory(store_path_of_run_dir(damaged), ec)) {
    damaged = store_path_of_run_dir(damaged);
  }
  auto report = repair_store_copy(damaged, options.copy);
  if (!report) {
    std::cerr << "leap repair-store: error: " << report.err().message << "\n";
    return 1;
  }
  std::cout << "repaired a copy of " << damaged.string() << " into " << options.copy << ": "
            << report->runs << " runs, " << report->steps << " step records, " << report->groups
            << " groups\n";
  if (report->lost) {
    std::cout << "warning: compared with what the damaged store had acknowledged, "
              << report->lost->describe() << "\n";
  }
  std::cout << "check it (for example: put it in an empty folder as 'trajectories' and run `leap "
               "replay` on that folder), then move "
            << damaged.string() << " aside and the copy into its place\n";
  return 0;
}

void add_repair(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<repair_options>();
  auto* cmd = app.add_subcommand(
      "repair-store",
      "Recover a damaged trajectory store into a copy: copies STORE to COPY, runs RocksDB's repair "
      "on the copy (it rebuilds the database's manifest from the table files and write-ahead logs "
      "it finds) and counts what the copy holds. STORE itself is only read.");
  cmd->add_option("store", options->store,
                  "The damaged store folder (RUN_DIR/trajectories), or its run folder")
      ->required();
  cmd->add_option("copy", options->copy, "Where to put the repaired copy (missing or empty)")
      ->required();
  cmd->callback([options, exit_code] { *exit_code = run_repair(*options); });
}

}  // namespace

LEAP_COMMAND("repair-store", add_repair);

}  // namespace leap::cli

// The daemon's home folder and what lies in it:
//   HOME/daemon.yaml                 settings (optional; see settings.hpp)
//   HOME/token                       bearer token of the control API, mode 0600
//   HOME/port                        the port the running daemon listens on (127.0.0.1)
//   HOME/experiments/ID/state.json   the experiment's record, replaced atomically on every change
//   HOME/experiments/ID/config.yaml  the config as submitted
//   HOME/experiments/ID/log          stdout and stderr of its `leap run` children, appended
// The daemon and its clients find it the same way: --home, else $LEAP_HOME, else
// $XDG_STATE_HOME/leap, else ~/.local/state/leap.
#pragma once

#include "common/result.hpp"
#include "tools/daemon/experiment.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace leap::daemon {

// The home folder from the --home flag (may be empty) and the environment; an error when neither
// it nor $HOME says where.
[[nodiscard]] result<std::filesystem::path> resolve_home(const std::string& flag);

// The token of the home: read when HOME/token exists (an error when other users may read it),
// else created with 256 random bits as 64 hex digits, mode 0600.
[[nodiscard]] result<std::string> ensure_token(const std::filesystem::path& home);
// Reads HOME/token for a client; an error naming the file when it is missing.
[[nodiscard]] result<std::string> read_token(const std::filesystem::path& home);

[[nodiscard]] result<std::string> read_text(const std::filesystem::path& path);
// At most the last `max_bytes` of the file (from a line start when it was cut); "" when missing.
[[nodiscard]] std::string read_tail(const std::filesystem::path& path, std::size_t max_bytes);

inline std::filesystem::path experiments_dir(const std::filesystem::path& home) {
  return home / "experiments";
}
inline std::filesystem::path experiment_dir(const std::filesystem::path& home,
                                            const std::string& id) {
  return experiments_dir(home) / id;
}

[[nodiscard]] status save_record(const std::filesystem::path& home, const experiment_record& r);

struct loaded_records {
  std::vector<experiment_record> records;
  std::vector<std::string> problems;  // state files that could not be read, with why
};
// Every HOME/experiments/*/state.json. A bad file is reported, not fatal.
[[nodiscard]] loaded_records load_records(const std::filesystem::path& home);

}  // namespace leap::daemon

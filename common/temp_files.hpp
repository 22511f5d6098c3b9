// Temporary files of "write beside, then rename into place": TARGET + MARKER + PID, so that two
// processes writing one target never share one. A process killed between the write and the rename
// leaves its temporary behind; remove_stale_temporaries() removes those whose process is gone,
// which every writer of such a target calls before it writes. A failed write removes its own
// temporary (the writers' job: see telemetry::write_file_atomically, `leap export`).
#pragma once

#include <cerrno>
#include <filesystem>
#include <signal.h>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

namespace leap {

// TARGET + MARKER + this process's id.
[[nodiscard]] inline std::filesystem::path temporary_of(const std::filesystem::path& target,
                                                        std::string_view marker) {
  return target.string() + std::string(marker) + std::to_string(static_cast<long long>(::getpid()));
}

// Removes TARGET + MARKER + PID files beside `target` whose process no longer exists (kill(pid, 0)
// says ESRCH). Those of live processes (this one included, or an unrelated process that reuses a
// dead writer's id) are left alone. Errors are ignored: a temporary that cannot be removed is
// only clutter. Returns how many were removed.
inline int remove_stale_temporaries(const std::filesystem::path& target, std::string_view marker) {
  const auto folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string prefix = target.filename().string() + std::string(marker);
  int removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
      continue;
    }
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) {
      continue;
    }
    if (::kill(pid, 0) == 0 || errno != ESRCH) {
      continue;
    }
    std::error_code removing;
    if (std::filesystem::remove(it->path(), removing)) {
      ++removed;
    }
  }
  return removed;
}

}  // namespace leap

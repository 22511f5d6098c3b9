#include "common/durable_file.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <utility>

namespace leap {
namespace {

constexpr std::string_view temporary_marker = ".tmp.";

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

constexpr std::string_view k_full_disk_marker = "; its folder has ";

// "<target>: <step>: <reason>", and on a full disk the free space the writer was refused.
error failure(const std::string& target, const std::string& step, int err) {
  std::string message = target + ": " + step + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    message += std::string(k_full_disk_marker) + describe_free_space(folder_of(target));
  }
  return error{message};
}

// close(2) that keeps errno of an earlier failure.
void close_quietly(int fd) {
  const int saved = errno;
  ::close(fd);
  errno = saved;
}

// Syncs a folder so that a rename or a creation in it is durable. A filesystem that cannot sync
// folders (EINVAL) makes its renames durable on its own terms; there is nothing more to do.
int sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  int err = 0;
  while (::fsync(fd) != 0) {
    if (errno != EINTR) {
      err = errno == EINVAL ? 0 : errno;
      break;
    }
  }
  ::close(fd);
  return err;
}

// Removes TARGET.tmp.PID and TARGET.tmp.PID.N files whose process no longer exists. Those of live
// processes (this one, or an unrelated one that reuses a dead writer's id) stay. Best effort: one
// that cannot be removed is only clutter.
void remove_stale_temporaries(const std::string& target) {
  const std::string prefix = name_of(target) + std::string(temporary_marker);
  const std::string folder = folder_of(target);
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) {
    return;
  }
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) {
      continue;
    }
    const std::string_view rest = name.substr(prefix.size());
    const std::string_view digits = rest.substr(0, rest.find('.'));
    const std::string_view sequence =
        digits.size() < rest.size() ? rest.substr(digits.size() + 1) : std::string_view("0");
    const auto all_digits = [](std::string_view s) {
      return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == s.npos;
    };
    if (!all_digits(digits) || digits.size() > 9 || !all_digits(sequence)) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(std::string(digits)));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) {
      continue;
    }
    ::unlinkat(::dirfd(dir), entry->d_name, 0);
  }
  ::closedir(dir);
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array<const char*, 5> units = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  }
  auto value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  // Two or three digits: a sandbox's feedback says sizes this way so that what a run leaves never
  // becomes an exact channel for what it was given.
  const bool whole =
      value >= 100 || value == static_cast<double>(static_cast<std::uint64_t>(value));
  std::array<char, 32> text{};
  (void)std::snprintf(text.data(), text.size(), whole ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text.data();
}

bool is_full_disk(const error& e) {
  return e.message.find(k_full_disk_marker) != std::string::npos;
}

std::string describe_free_space(const std::string& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) {
    return "its free space is unknown (statvfs: " + std::string(std::strerror(errno)) + ")";
  }
  const auto available = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  const auto total = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
  return format_bytes(available) + " free of " + format_bytes(total) + " on its filesystem";
}

result<durable_writer> durable_writer::open(const std::string& path, int mode, durability sync) {
  remove_stale_temporaries(path);
  // PID.N: unique among this process's writers (threads writing one target at once) and among
  // processes; O_EXCL never opens a file another writer holds.
  static std::atomic<std::uint64_t> sequence{0};
  const std::string base = path + std::string(temporary_marker) + std::to_string(::getpid()) + ".";
  for (int attempt = 0;; ++attempt) {
    std::string temporary = base + std::to_string(sequence.fetch_add(1));
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                          static_cast<mode_t>(mode));
    if (fd >= 0) {
      return durable_writer(path, std::move(temporary), fd, sync);
    }
    if (errno != EEXIST || attempt == 100) {
      return failure(path, "cannot create its temporary file " + temporary, errno);
    }
  }
}

durable_writer::durable_writer(durable_writer&& other) noexcept
    : target_(std::move(other.target_)),
      temporary_(std::move(other.temporary_)),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_),
      failed_(other.failed_),
      sync_(other.sync_) {
  other.temporary_.clear();
}

durable_writer& durable_writer::operator=(durable_writer&& other) noexcept {
  if (this != &other) {
    abandon();
    target_ = std::move(other.target_);
    temporary_ = std::exchange(other.temporary_, std::string{});
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
    failed_ = other.failed_;
    sync_ = other.sync_;
  }
  return *this;
}

durable_writer::~durable_writer() { abandon(); }

void durable_writer::abandon() {
  if (fd_ >= 0) {
    close_quietly(fd_);
    fd_ = -1;
  }
  if (!temporary_.empty()) {
    const int saved = errno;
    ::unlink(temporary_.c_str());
    errno = saved;
    temporary_.clear();
  }
}

status durable_writer::write(std::string_view bytes) {
  if (fd_ < 0 || failed_) {
    return error{target_ + ": cannot write: the writer failed or was committed before"};
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      // write(2) returns 0 for a non-empty buffer only on a device that takes no more.
      const int err = n == 0 ? ENOSPC : errno;
      failed_ = true;
      auto e = failure(target_, "cannot write", err);
      abandon();
      return e;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
    written_ += static_cast<std::uint64_t>(n);
  }
  return ok_status();
}

status durable_writer::commit() {
  auto placed = place(true);
  if (!placed) {
    return placed.err();
  }
  return ok_status();
}

result<bool> durable_writer::commit_new() { return place(false); }

result<bool> durable_writer::place(bool replace) {
  if (fd_ < 0 || failed_) {
    return error{target_ + ": cannot commit: the writer failed or was committed before"};
  }
  const auto fail = [this](const std::string& step, int err) {
    failed_ = true;
    auto e = failure(target_, step, err);
    abandon();
    return e;
  };
  // The data first: a rename made durable before the data can leave an empty file after a power
  // loss. A filesystem that allocates late (ext4, XFS, NFS) reports a full disk only here.
  while (sync_ == durability::synced && ::fsync(fd_) != 0) {
    if (errno != EINTR) {
      return fail("cannot sync", errno);
    }
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) {
    return fail("cannot close", errno);
  }
  if (replace) {
    if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
      return fail("cannot replace it with " + temporary_, errno);
    }
    temporary_.clear();
  } else {
    // link(2) fails with EEXIST where rename(2) would replace: of two creators, one succeeds.
    if (::link(temporary_.c_str(), target_.c_str()) != 0) {
      if (errno == EEXIST) {
        failed_ = true;
        abandon();
        return false;
      }
      return fail("cannot create it from " + temporary_, errno);
    }
    abandon();  // removes the temporary name; the target keeps the file
  }
  failed_ = true;  // placed: no more writes
  if (sync_ == durability::unsynced) {
    return true;
  }
  const std::string folder = folder_of(target_);
  if (const int err = sync_folder(folder); err != 0) {
    return failure(target_, "written, but its folder " + folder + " cannot be synced", err);
  }
  return true;
}

status write_file_durably(const std::string& path, std::span<const std::string_view> parts,
                          int mode, durability sync) {
  auto writer = durable_writer::open(path, mode, sync);
  if (!writer) {
    return writer.err();
  }
  for (const auto part : parts) {
    if (auto s = writer->write(part); !s) {
      return s;
    }
  }
  return writer->commit();
}

status write_file_durably(const std::string& path, std::string_view bytes, int mode,
                          durability sync) {
  return write_file_durably(path, std::span<const std::string_view>(&bytes, 1), mode, sync);
}

result<bool> create_file_durably(const std::string& path, std::string_view bytes, int mode) {
  auto writer = durable_writer::open(path, mode);
  if (!writer) {
    return writer.err();
  }
  if (auto s = writer->write(bytes); !s) {
    return s.err();
  }
  return writer->commit_new();
}

status rename_durably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return error{"cannot rename '" + from + "' to '" + to + "': " + std::strerror(errno)};
  }
  // The entry appears in the folder of `to` and leaves that of `from`: both must reach the disk.
  const std::string to_folder = folder_of(to);
  const std::string from_folder = folder_of(from);
  const std::string* folder = &to_folder;
  int err = sync_folder(to_folder);
  if (err == 0 && from_folder != to_folder) {
    folder = &from_folder;
    err = sync_folder(from_folder);
  }
  if (err != 0) {
    return error{"renamed '" + from + "' to '" + to + "', but cannot sync the folder '" + *folder +
                 "': " + std::strerror(err)};
  }
  return ok_status();
}

}  // namespace leap

// Files written whole or not at all, and kept across a crash or a power loss: the bytes go to a
// temporary file beside the target, which is synced, renamed over the target, and the folder is
// synced. A reader sees the old file or the new one, never a torn one; after the call returns,
// the new one survives a power loss (the rename is never made durable before the data), unless
// the caller asked for durability::unsynced.
//
// Plain string paths and POSIX calls on purpose: learner/ links this, and LibTorch wheels from pip
// export std::filesystem symbols of their own toolchain (see learner/detail/files.hpp).
//
// Errors name the target file, the step that failed and the reason; on a full disk (ENOSPC, or
// EDQUOT for a quota) they add the free space of the folder's filesystem:
//   "/run/ckpt/model.safetensors: cannot write: No space left on device; its folder has 0 bytes
//    free of 6.0 MiB on its filesystem"
// A failed write removes its temporary file. One killed mid-write leaves TARGET.tmp.PID.N behind:
// every write removes those of TARGET whose process is gone. All functions are thread-safe; two
// writers of one target end with one of the two files whole.
#pragma once

#include "common/result.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace leap {

// Whether a write waits for the disk. Default: synced.
enum class durability {
  // The file is synced before the rename and the folder after it: whole after a power loss.
  synced,
  // Only atomic for readers (temporary and rename, no sync): a power loss may leave the old file,
  // or an empty one. For files rewritten soon anyway, where a sync costs more than it keeps (the
  // weight folders the inference servers reload each step: about 0.8 s per GiB on a 1.3 GB/s
  // disk).
  unsynced,
};

// Writes the concatenation of `parts` to `path`, replacing the file there, with permission bits
// `mode` (less the umask). Parts let a caller write a header and large buffers without joining
// them in memory. Errors: see above; on an error the old file at `path` is untouched, except when
// only the folder's sync after the rename failed ("written, but its folder ... cannot be synced").
[[nodiscard]] status write_file_durably(const std::string& path,
                                        std::span<const std::string_view> parts, int mode = 0644,
                                        durability sync = durability::synced);
[[nodiscard]] status write_file_durably(const std::string& path, std::string_view bytes,
                                        int mode = 0644, durability sync = durability::synced);

// Like write_file_durably, but never replaces a file: false (and the file at `path` untouched)
// when `path` exists, true when this call created it. Two callers racing on one path: exactly one
// gets true. Uses link(2), so the folder's filesystem must support hard links.
[[nodiscard]] result<bool> create_file_durably(const std::string& path, std::string_view bytes,
                                               int mode = 0644);

// rename(2), then syncs the folders of `to` (and of `from` when it differs), so that the move
// survives a power loss. Errors name both paths.
[[nodiscard]] status rename_durably(const std::string& from, const std::string& to);

// A file written in pieces (an export of unknown size), then put in place by commit(). Destroyed
// without a successful commit(), it removes its temporary file and leaves the target untouched.
class durable_writer {
 public:
  // Creates the temporary file beside `path`. Errors: it cannot be created.
  [[nodiscard]] static result<durable_writer> open(const std::string& path, int mode = 0644,
                                                   durability sync = durability::synced);

  durable_writer(durable_writer&& other) noexcept;
  durable_writer& operator=(durable_writer&& other) noexcept;
  durable_writer(const durable_writer&) = delete;
  durable_writer& operator=(const durable_writer&) = delete;
  ~durable_writer();

  // Appends `bytes`; loops on partial writes and EINTR. After an error the writer only fails.
  [[nodiscard]] status write(std::string_view bytes);
  // Syncs the file, renames it over the target and syncs the folder. At most once.
  [[nodiscard]] status commit();
  // Like commit(), but never replaces: false, and the temporary removed, when the target exists.
  [[nodiscard]] result<bool> commit_new();

  [[nodiscard]] const std::string& target() const { return target_; }
  // Bytes written so far.
  [[nodiscard]] std::uint64_t size() const { return written_; }

 private:
  durable_writer(std::string target, std::string temporary, int fd, durability sync)
      : target_(std::move(target)), temporary_(std::move(temporary)), fd_(fd), sync_(sync) {}
  void abandon();
  [[nodiscard]] result<bool> place(bool replace);

  std::string target_;
  std::string temporary_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool failed_ = false;
  durability sync_ = durability::synced;
};

// "1.2 MiB free of 6 MiB on its filesystem": the space an unprivileged writer may still use
// (statvfs's f_bavail) on the filesystem holding `path`, in the store's units (bytes, KiB, MiB,
// ...); "its free space is unknown (statvfs: ...)" when statvfs fails.
[[nodiscard]] std::string describe_free_space(const std::string& path);

// "1 byte", "512 bytes", "6 MiB", "1.8 GiB", "256 MiB": a size to two or three digits in binary
// units, as every message and feedback text of the project gives one (a decimal only below 100
// and where the value is not whole).
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

// Whether an error of this file's functions came from a full disk (ENOSPC or EDQUOT: the ones
// that name the free space).
[[nodiscard]] bool is_full_disk(const error& e);

}  // namespace leap

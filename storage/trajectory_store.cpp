#include "storage/trajectory_store.hpp"

#include "common/durable_file.hpp"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>

namespace leap {

namespace {

enum cf_index : std::size_t { cf_runs, cf_steps, cf_groups, cf_metrics, cf_by_task, cf_count };
constexpr std::array<const char*, cf_count> cf_names = {"runs", "steps", "groups", "metrics",
                                                        "by_task"};
constexpr std::string_view schema_key = "leap.store.schema";

using cf_handles = std::array<rocksdb::ColumnFamilyHandle*, cf_count>;

std::string le_bytes(std::uint64_t v, std::size_t width) {
  std::string out;
  for (std::size_t i = 0; i < width; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFU));
  }
  return out;
}

std::uint64_t from_le(std::string_view bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) {
    v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return v;
}

std::string describe(const group_ref& ref) {
  return "group (run '" + ref.run_id + "', step " + std::to_string(ref.step) + ", " +
         to_string(ref.split) + " group " + std::to_string(ref.group_index) + ")";
}

std::string_view view(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

// Column family tuning: LZ4 for the hot levels (cheap on a 2-core host), ZSTD where data settles;
// token arrays compress to about half.
rocksdb::ColumnFamilyOptions family_options() {
  rocksdb::ColumnFamilyOptions options;
  const auto supported = rocksdb::GetSupportedCompressions();
  auto has = [&](rocksdb::CompressionType t) {
    return std::find(supported.begin(), supported.end(), t) != supported.end();
  };
  if (has(rocksdb::kLZ4Compression)) {
    options.compression = rocksdb::kLZ4Compression;
  }
  if (has(rocksdb::kZSTD)) {
    options.bottommost_compression = rocksdb::kZSTD;
  }
  return options;
}

// RocksDB's info log (the store's LOG file). RocksDB's own logger writes it through a buffered file
// writer that, after one failed append (a full disk), fails an assertion on its next line in
// builds with assertions on (Debian's): the first "No space left on device" aborted `leap run`
// with status 134. This one writes each line with one write(2) and drops a line it cannot write,
// so a full disk costs log lines, never the process.
class store_log final : public rocksdb::Logger {
 public:
  explicit store_log(const std::filesystem::path& folder)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {
    const auto file = folder / "LOG";
    // Appended to, so that an open refused because another process has the store (which still
    // gets this far) leaves that process's log in place; kept below 16 MiB by starting over.
    // Failures are not errors: the store works without its diagnostic log.
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && st.st_size > (16 << 20)) {
      (void)::rename(file.c_str(), (folder / "LOG.old").c_str());
    }
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  ~store_log() override { (void)close_fd(); }
  store_log(const store_log&) = delete;
  store_log& operator=(const store_log&) = delete;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0) {
      return;
    }
    std::array<char, 4096> line{};
    const auto now = std::chrono::system_clock::now();
    const auto seconds = std::chrono::system_clock::to_time_t(now);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1'000'000;
    std::tm local{};
    ::localtime_r(&seconds, &local);
    std::size_t n = std::strftime(line.data(), line.size(), "%Y/%m/%d-%H:%M:%S", &local);
    n += static_cast<std::size_t>(std::snprintf(line.data() + n, line.size() - n, ".%06lld ",
                                                static_cast<long long>(micros)));
    const int body = std::vsnprintf(line.data() + n, line.size() - n, format, ap);
    if (body > 0) {
      n = std::min(n + static_cast<std::size_t>(body), line.size() - 2);
    }
    if (line[n - 1] != '\n') {
      line[n++] = '\n';
    }
    // A line that cannot be written (a full disk) is dropped; the next one tries again.
    (void)!::write(fd_, line.data(), n);
  }

 protected:
  rocksdb::Status CloseImpl() override { return close_fd(); }

 private:
  rocksdb::Status close_fd() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    return rocksdb::Status::OK();
  }
  int fd_ = -1;
};

// RocksDB's recovery from a background error (a full disk) resumes writing in the background
// once space frees up. The store instead stops writing at its first failed write and lets the
// next open recover from the log, so nothing writes to a disk that another process is filling
// while the run ends; RocksDB 7's resume path also reuses the log writer that failed.
class no_auto_recovery final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*bg_error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// ---- the acknowledged-writes mark: "LEAPACK1", the sequence number, and the number xor a constant
// (so that a torn or zeroed file is told from a mark), little-endian. 24 bytes, rewritten in place:
// one write within one disk sector, so a power loss leaves the old or the new mark.
constexpr std::string_view mark_magic = "LEAPACK1";
constexpr std::uint64_t mark_check = 0x9E3779B97F4A7C15ULL;
constexpr std::size_t mark_size = 24;

std::string encode_mark(std::uint64_t seq) {
  return std::string(mark_magic) + le_bytes(seq, 8) + le_bytes(seq ^ mark_check, 8);
}

struct mark_state {
  bool present = false;
  bool valid = false;
  std::uint64_t seq = 0;
};

result<mark_state> read_mark(const std::filesystem::path& file) {
  mark_state out;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return out;
    }
    return error{file.string() + ": cannot read: " + std::strerror(errno)};
  }
  out.present = true;
  std::array<char, mark_size + 1> bytes{};
  const auto n = ::pread(fd, bytes.data(), bytes.size(), 0);
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) {
    return error{file.string() + ": cannot read: " + std::strerror(read_errno)};
  }
  const std::string_view content(bytes.data(), static_cast<std::size_t>(n));
  if (content.size() == mark_size && content.substr(0, 8) == mark_magic) {
    out.seq = from_le(content.substr(8, 8));
    out.valid = (out.seq ^ mark_check) == from_le(content.substr(16, 8));
  }
  return out;
}

status fsync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return error{folder.string() + ": cannot open to sync: " + std::strerror(errno)};
  }
  const int rc = ::fsync(fd);
  const int sync_errno = errno;
  ::close(fd);
  if (rc != 0) {
    return error{folder.string() + ": fsync: " + std::strerror(sync_errno)};
  }
  return ok_status();
}

// A store's first mark, written whole under another name and renamed into place: a process killed
// between creating the mark and writing it would leave an empty mark, which reads as a damaged one
// and refuses the store. Only the LOCK's holder calls this, so the other name is fixed.
status write_new_mark(const std::filesystem::path& folder, std::uint64_t seq, bool sync) {
  const auto file = folder / acknowledged_mark_file;
  const auto temporary = folder / (std::string(acknowledged_mark_file) + ".new");
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return error{"cannot create " + temporary.string() + ": " + std::strerror(errno)};
  }
  const auto bytes = encode_mark(seq);
  const bool wrote = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  const int write_errno = errno;
  const bool synced = wrote && (!sync || ::fdatasync(fd) == 0);
  const int sync_errno = errno;
  ::close(fd);
  if (!synced) {
    (void)::unlink(temporary.c_str());
    return error{temporary.string() +
                 (wrote ? ": fdatasync: " + std::string(std::strerror(sync_errno))
                        : ": cannot write: " + std::string(std::strerror(write_errno)))};
  }
  if (::rename(temporary.c_str(), file.c_str()) != 0) {
    const int rename_errno = errno;
    (void)::unlink(temporary.c_str());
    return error{"cannot rename " + temporary.string() + " to " + file.string() + ": " +
                 std::strerror(rename_errno)};
  }
  return sync ? fsync_folder(folder) : ok_status();
}

// The entries of a folder that lacks CURRENT, for the damage message (at most a few named).
std::string list_entries(const std::filesystem::path& folder, std::size_t* count) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  *count = names.size();
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 8; ++i) {
    out += (i == 0 ? "" : ", ") + names[i];
  }
  if (names.size() > 8) {
    out += ", ...";
  }
  return out;
}

// The process that holds the store's LOCK, RocksDB's fcntl lock of a writer, read from
// /proc/locks: asking fcntl would mean opening LOCK, and closing that descriptor would drop a lock
// this process holds on it.
std::optional<long> lock_holder(const std::filesystem::path& folder) {
  struct stat st {};
  if (::stat((folder / "LOCK").c_str(), &st) != 0) {
    return std::nullopt;
  }
  std::array<char, 64> id{};
  (void)std::snprintf(id.data(), id.size(), "%02x:%02x:%llu", ::major(st.st_dev),
                      ::minor(st.st_dev), static_cast<unsigned long long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    // "1: POSIX  ADVISORY  WRITE 4242 fe:00:123456 0 EOF"; waiters' lines have "->" after "1:".
    std::istringstream fields(line);
    std::string number;
    std::string kind;
    std::string mode;
    std::string access;
    long pid = 0;
    std::string file;
    if (fields >> number >> kind >> mode >> access >> pid >> file && kind == "POSIX" &&
        file == id.data()) {
      return pid;
    }
  }
  return std::nullopt;
}

bool folder_is_empty(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::directory_iterator it(folder, ec);
  return ec || it == std::filesystem::directory_iterator();
}

// A store that cannot be made beside its folder (the folder is a mount point) is made in it, and
// RocksDB writes LOCK, IDENTITY and MANIFEST there before CURRENT. Its maker holds flock(2) on the
// folder from before the first of those until the store is whole, so that another process finding
// files without CURRENT can tell a store being made from a damaged one, and a folder whose maker
// died mid-way from one a live maker is filling. (RocksDB's own LOCK cannot serve: it is a file in
// the folder, created before it is locked.)
class folder_lock {
 public:
  // The folder's lock for this process alone; nullopt when another process holds it.
  static result<std::optional<folder_lock>> try_exclusive(const std::filesystem::path& folder) {
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return error{"cannot open the folder " + folder.string() + ": " + std::strerror(errno)};
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int lock_errno = errno;
      ::close(fd);
      if (lock_errno == EWOULDBLOCK) {
        return std::optional<folder_lock>{};
      }
      return error{"cannot lock the folder " + folder.string() + ": " + std::strerror(lock_errno)};
    }
    return std::optional<folder_lock>{folder_lock(fd)};
  }

  // Whether a process is making a store in the folder now (asked without waiting).
  static bool held_elsewhere(const std::filesystem::path& folder) {
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return false;
    }
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);  // drops the shared lock if it was taken
    return held;
  }

  folder_lock(folder_lock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  folder_lock& operator=(folder_lock&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  folder_lock(const folder_lock&) = delete;
  folder_lock& operator=(const folder_lock&) = delete;
  ~folder_lock() { release(); }

 private:
  explicit folder_lock(int fd) : fd_(fd) {}
  void release() {
    if (fd_ >= 0) {
      ::close(fd_);  // drops the lock
      fd_ = -1;
    }
  }
  int fd_;
};

// Whether the folder holds only what RocksDB writes before CURRENT when it makes a database: the
// LOCK, IDENTITY, MANIFEST, OPTIONS and info log files, CURRENT's temporary and empty write-ahead
// logs. Such a folder holds no data: a store's first write needs CURRENT, and its mark
// (acknowledged_mark_file) and table files come after. Any other file, or a log with bytes in it,
// may be data.
bool only_creation_leftovers(const std::filesystem::path& folder) {
  std::error_code ec;
  bool any = false;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto name = it->path().filename().string();
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) {
      return false;
    }
    const bool metadata = name == "LOCK" || name == "IDENTITY" || name == "LOG" ||
                          name.starts_with("LOG.old") || name.starts_with("MANIFEST-") ||
                          name.starts_with("OPTIONS-") || name.ends_with(".dbtmp");
    const bool empty_log = name.ends_with(".log") && it->file_size(entry_ec) == 0 && !entry_ec;
    if (!metadata && !empty_log) {
      return false;
    }
    any = true;
  }
  return any && !ec;
}

// The refusal of a store that another process holds: RocksDB's LOCK, an fcntl lock that a writer
// takes before it writes anything and holds until it closes.
error in_use(const std::string& where, std::optional<long> holder) {
  return error{where + ": the store is being created or used by another process" +
               (holder ? " (process " + std::to_string(*holder) + " holds its LOCK)" : "") +
               "; nothing in the folder was changed. Wait for that process to end, or stop it, "
               "then open the store again"};
}

// The holder of the store's LOCK when it is not this process.
std::optional<long> other_lock_holder(const std::filesystem::path& folder) {
  const auto holder = lock_holder(folder);
  if (holder && *holder == static_cast<long>(::getpid())) {
    return std::nullopt;
  }
  return holder;
}

// RocksDB's refusal to take the LOCK because another process holds it (PosixFileSystem::LockFile:
// "While lock file: .../LOCK: Resource temporarily unavailable"; fcntl may also say EACCES).
// "lock hold by current process", another open in this process, is not one.
bool lock_conflict(const rocksdb::Status& s) {
  if (!s.IsIOError()) {
    return false;
  }
  const auto text = s.ToString();
  return text.find("While lock file") != std::string::npos &&
         (text.find("Resource temporarily unavailable") != std::string::npos ||
          text.find("Permission denied") != std::string::npos);
}

// ---- creation. RocksDB makes a database's files one by one (LOCK, IDENTITY, MANIFEST, the info
// log, CURRENT last), and a process that looked at the folder in between saw files without
// CURRENT: a damaged store, for all it could tell. So a new store is made in a private folder
// beside its path, synced, and renamed onto the path: rename(2) onto a missing path or an empty
// folder is atomic, and onto a folder with files it fails, when another process's store got there
// first. Nobody sees a half-made store at the path, also when its maker is killed mid-way.

// ".<name>.creating-<pid>-<random>" for a folder being made, ".<name>.removing-<pid>-<random>" for
// one being removed after its maker died.
std::string beside_prefix(const std::filesystem::path& target, std::string_view kind) {
  return "." + target.filename().string() + "." + std::string(kind) + "-";
}

std::filesystem::path beside(const std::filesystem::path& target, std::string_view kind) {
  std::random_device device;
  const std::uint64_t bits = (static_cast<std::uint64_t>(device()) << 32U) | device();
  std::array<char, 17> hex{};
  (void)std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(bits));
  return target.parent_path() /
         (beside_prefix(target, kind) + std::to_string(::getpid()) + "-" + hex.data());
}

// The maker's pid in a name "<prefix><pid>-<random>", if the name has that shape.
std::optional<pid_t> maker_of(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) {
    return std::nullopt;
  }
  const auto rest = name.substr(prefix.size());
  const auto dash = rest.find('-');
  if (dash == std::string_view::npos || dash + 1 == rest.size()) {
    return std::nullopt;
  }
  pid_t pid = 0;
  const auto [end, parsed] = std::from_chars(rest.data(), rest.data() + dash, pid);
  if (parsed != std::errc{} || end != rest.data() + dash || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

// Removes the folders that creations of `target` left when their process died (killed mid-way).
// A folder whose maker lives is kept. Each is renamed aside before it is removed: were its maker
// alive after all (in another pid namespace, where kill() cannot see it) and renaming it onto the
// store meanwhile, a removal by path could reach into the store; this way the maker's rename
// fails instead, and it says so.
void remove_abandoned_creations(const std::filesystem::path& target) {
  const auto creating = beside_prefix(target, "creating");
  const auto removing = beside_prefix(target, "removing");
  std::vector<std::filesystem::path> abandoned;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(target.parent_path(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto name = it->path().filename().string();
    auto pid = maker_of(name, creating);
    if (!pid) {
      pid = maker_of(name, removing);
    }
    // ESRCH only when no such process exists (EPERM: it exists, another user's).
    if (pid && ::kill(*pid, 0) != 0 && errno == ESRCH) {
      abandoned.push_back(it->path());
    }
  }
  for (const auto& folder : abandoned) {
    const auto aside = beside(target, "removing");
    if (::rename(folder.c_str(), aside.c_str()) == 0) {
      std::filesystem::remove_all(aside, ec);  // what stays is removed by a later creation
    }
  }
}

// Every file of a folder, and the folder, on disk.
status sync_folder_and_files(const std::filesystem::path& folder) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) {
      continue;
    }
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return error{it->path().string() + ": cannot open to sync: " + std::strerror(errno)};
    }
    const int rc = ::fsync(fd);
    const int sync_errno = errno;
    ::close(fd);
    if (rc != 0) {
      return error{it->path().string() + ": fsync: " + std::strerror(sync_errno)};
    }
  }
  if (ec) {
    return error{folder.string() + ": cannot list: " + ec.message()};
  }
  return fsync_folder(folder);
}

enum class creation {
  moved_into_place,  // this process's new store is at the path
  made_by_another,   // the path held files when the new store was to move there
  in_place,          // cannot be made beside the path: the caller creates it in the folder
};

// Makes a new database (every family, synced) in a private folder beside `path`, then renames it
// onto `path`; open() then writes the schema version, as for any store without one. `in_place`
// where that cannot work: `path` is a mount point (rename fails with EBUSY or EXDEV), or its
// parent is not writable by this process while an empty `path` may be; the caller then creates
// the store in the folder itself, where another process can see it half-made.
result<creation> create_beside(const std::filesystem::path& path, rocksdb::Options options,
                               const std::string& where) {
  std::error_code ec;
  auto target = std::filesystem::absolute(path, ec);
  if (ec) {
    return error{where + ": cannot resolve the path: " + ec.message()};
  }
  if (!target.has_filename()) {
    target = target.parent_path();  // "run/trajectories/"
  }
  if (std::filesystem::is_symlink(target, ec)) {
    // Replacing the link would put the store where the link is, not where it points.
    target = std::filesystem::canonical(target, ec);
    if (ec) {
      return error{where + ": cannot resolve the link: " + ec.message()};
    }
  }
  if (target.filename() == "." || target.filename() == "..") {
    return creation::in_place;
  }
  std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) {
    return error{where + ": cannot create the folder: " + ec.message()};
  }
  remove_abandoned_creations(target);

  const auto folder = beside(target, "creating");
  if (::mkdir(folder.c_str(), 0755) != 0) {
    const int mkdir_errno = errno;
    if (mkdir_errno == EACCES || mkdir_errno == EPERM || mkdir_errno == ENAMETOOLONG) {
      return creation::in_place;
    }
    return error{where + ": cannot create " + folder.string() + ": " + std::strerror(mkdir_errno) +
                 "; the store has " + describe_free_space(target.parent_path().string())};
  }
  auto discard = [&] {
    std::error_code remove_ec;
    std::filesystem::remove_all(folder, remove_ec);
  };
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.info_log = std::make_shared<store_log>(folder);
  options.listeners.push_back(std::make_shared<no_auto_recovery>());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, options}};
  for (const char* name : cf_names) {
    descriptors.emplace_back(name, options);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  auto s = rocksdb::DB::Open(options, folder.string(), descriptors, &handles, &raw);
  if (s.ok()) {
    for (auto* handle : handles) {
      const auto destroyed = raw->DestroyColumnFamilyHandle(handle);
      if (s.ok()) {
        s = destroyed;
      }
    }
    const auto closed = raw->Close();
    if (s.ok()) {
      s = closed;
    }
    delete raw;
  }
  if (!s.ok()) {
    discard();
    return error{where + ": create: " + s.ToString() + "; the store has " +
                 describe_free_space(target.parent_path().string())};
  }
  if (auto synced = sync_folder_and_files(folder); !synced) {
    discard();
    return error{where + ": create: " + synced.err().message};
  }
  if (::rename(folder.c_str(), target.c_str()) != 0) {
    const int rename_errno = errno;
    discard();
    if (rename_errno == ENOTEMPTY || rename_errno == EEXIST) {
      return creation::made_by_another;
    }
    if (rename_errno == EBUSY || rename_errno == EXDEV) {
      return creation::in_place;
    }
    return error{where + ": cannot move the new store from " + folder.string() +
                 " into place: " + std::strerror(rename_errno)};
  }
  // The rename on disk too, as RocksDB syncs the folder after it writes CURRENT.
  if (auto synced = fsync_folder(target.parent_path()); !synced) {
    return error{where + ": " + synced.err().message};
  }
  return creation::moved_into_place;
}

}  // namespace

std::string lost_writes_report::describe() const {
  if (mark_unreadable) {
    return "its record of acknowledged writes (" + std::string(acknowledged_mark_file) +
           ") is damaged, so whether it lost acknowledged writes is unknown; it holds writes up to "
           "number " +
           std::to_string(present);
  }
  return "it lost " + std::to_string(acknowledged - present) +
         " record writes it had acknowledged (the last acknowledged is number " +
         std::to_string(acknowledged) + ", the store now ends at number " +
         std::to_string(present) +
         "; a group is 3 writes, a finished turn 1, a run 1, a step 1 plus one per metric), so the "
         "newest groups, "
         "steps or run records are gone: its write-ahead log (*.log) was probably truncated or "
         "deleted, or the disk lost data it had confirmed";
}

std::filesystem::path store_path_of_run_dir(const std::filesystem::path& run_dir) {
  return run_dir / "trajectories";
}

// ---- store state
// ---------------------------------------------------------------------------------

struct trajectory_store::impl {
  std::filesystem::path path;
  store_options options;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> all_handles;  // every family opened, ours and others
  cf_handles cf{};
  std::optional<lost_writes_report> lost;
  // The acknowledged-writes mark (writable stores): its file, and the number it holds.
  std::mutex mark_mutex;
  int mark_fd = -1;
  std::uint64_t mark_seq = 0;
  // The first failed write: the store takes no more writes after it (see stop_writes()).
  mutable std::mutex failure_mutex;
  std::optional<std::string> failure;

  ~impl() {
    if (mark_fd >= 0) {
      ::close(mark_fd);
    }
  }

  // Records the database's last write as acknowledged. Called after each successful write.
  status update_mark(bool force = false) {
    std::lock_guard lock(mark_mutex);
    if (mark_fd < 0 || !db) {
      return ok_status();
    }
    const auto seq = db->GetLatestSequenceNumber();
    if (seq <= mark_seq && !force) {
      return ok_status();
    }
    const auto bytes = encode_mark(seq);
    const auto file = (path / acknowledged_mark_file).string();
    if (::pwrite(mark_fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      return mark_failed(file + " could not be updated: " + std::strerror(errno));
    }
    if (options.sync && ::fdatasync(mark_fd) != 0) {
      return mark_failed(file + " could not be synced: " + std::strerror(errno));
    }
    mark_seq = seq;
    return ok_status();
  }

  [[nodiscard]] std::string where() const { return "trajectory store '" + path.string() + "'"; }

  // The mark is behind the write it records: later writes are refused like after a failed write.
  // Called with mark_mutex held.
  [[nodiscard]] error mark_failed(const std::string& why) {
    std::string message = where() + ": the write is stored, but " + why + "; the store has " +
                          describe_free_space(path.string()) + ". It takes no more writes";
    std::lock_guard lock(failure_mutex);
    if (!failure) {
      failure = message;
    }
    return error{message};
  }

  [[nodiscard]] error fail(std::string_view what, const rocksdb::Status& s) const {
    std::string message = where() + ": " + std::string(what) + ": " + s.ToString();
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      message +=
          " (another process has this store open for writing; a read-only open can read "
          "alongside it)";
    }
    return error{message};
  }

  // A write that failed (a full disk, an I/O error): the error names the store, RocksDB's
  // reason and the free space on the store's filesystem (and, when the disk is full, how much
  // the store needs). From then on the store issues no writes or syncs: RocksDB keeps the failed
  // log file's writer, and writing or syncing through it again is what RocksDB 7 asserts on.
  // What was acknowledged before is in the synced log; the next open recovers it.
  [[nodiscard]] error stop_writes(const std::string& what, const rocksdb::Status& s,
                                  std::uint64_t write_bytes) {
    std::string message =
        fail(what, s).message + "; the store has " + describe_free_space(path.string());
    if (s.IsNoSpace() && db) {
      // The memtables' memory is an upper bound of what their flush writes (it is compressed).
      std::uint64_t buffered = 0;
      (void)db->GetAggregatedIntProperty("rocksdb.cur-size-all-mem-tables", &buffered);
      message += "; this write needs " + format_bytes(write_bytes) +
                 " in the log, and moving the records buffered in memory to table files up to " +
                 format_bytes(buffered) + " more";
    }
    message +=
        ". It takes no more writes; every write acknowledged before is kept. Free space, then run "
        "again to continue";
    std::lock_guard lock(failure_mutex);
    if (!failure) {
      failure = message;
    }
    return error{message};
  }

  // Refuses a write once one has failed.
  [[nodiscard]] status check_writable() const {
    std::lock_guard lock(failure_mutex);
    if (failure) {
      return error{where() + ": takes no more writes since a write failed: " + *failure};
    }
    return ok_status();
  }

  [[nodiscard]] status check_open() const {
    if (!db) {
      return error{where() + ": the store is closed"};
    }
    return ok_status();
  }

  status close() {
    if (!db) {
      return ok_status();
    }
    rocksdb::Status first;
    for (auto* h : all_handles) {
      auto s = db->DestroyColumnFamilyHandle(h);
      if (first.ok() && !s.ok()) {
        first = s;
      }
    }
    all_handles.clear();
    cf.fill(nullptr);
    auto s = db->Close();
    db.reset();
    if (!first.ok()) {
      return fail("close", first);
    }
    if (!s.ok()) {
      return fail("close", s);
    }
    return ok_status();
  }

  // Iterates [lower, upper) of a family (an empty `upper` means to the end) on one snapshot.
  template <class F>
  status scan(cf_index family, const std::string& lower, const std::string& upper, F&& each) const {
    return scan(cf[family], std::string("'") + cf_names[family] + "'", lower, upper,
                std::forward<F>(each));
  }
  // The same over any family's handle (the default family's record kinds); `what` names the scan.
  template <class F>
  status scan(rocksdb::ColumnFamilyHandle* family, const std::string& what,
              const std::string& lower, const std::string& upper, F&& each) const {
    if (auto s = check_open(); !s) {
      return s;
    }
    rocksdb::ReadOptions read;
    rocksdb::Slice upper_slice(upper);
    if (!upper.empty()) {
      read.iterate_upper_bound = &upper_slice;
    }
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read, family));
    for (it->Seek(lower); it->Valid(); it->Next()) {
      if (auto s = each(view(it->key()), view(it->value())); !s) {
        return s;
      }
    }
    if (!it->status().ok()) {
      return fail("scan of " + what, it->status());
    }
    return ok_status();
  }

  result<std::optional<std::string>> get(cf_index family, const std::string& key,
                                         const rocksdb::Snapshot* snapshot = nullptr) const {
    if (auto s = check_open(); !s) {
      return s.err();
    }
    rocksdb::ReadOptions read;
    read.snapshot = snapshot;
    std::string value;
    auto s = db->Get(read, cf[family], key, &value);
    if (s.IsNotFound()) {
      return std::optional<std::string>{};
    }
    if (!s.ok()) {
      return fail(std::string("read from '") + cf_names[family] + "'", s);
    }
    return std::optional<std::string>{std::move(value)};
  }

  // Sets group.optimise from the decision stored beside the group (gate.optimise); a group
  // without one (optimisation off, or a store made before decisions were stored) keeps none.
  status attach_optimise(group_record& group, const group_ref& ref,
                         const rocksdb::Snapshot* snapshot = nullptr) const {
    rocksdb::ReadOptions read;
    read.snapshot = snapshot;
    std::string value;
    auto s = db->Get(read, all_handles[0], keys::optimise(ref), &value);
    if (s.IsNotFound()) {
      return ok_status();
    }
    if (!s.ok()) {
      return fail("read of an optimisation decision", s);
    }
    auto decision = decode_optimise(value);
    if (!decision) {
      return decision.err().wrap(where() + ": optimisation decision of " + describe(ref));
    }
    group.optimise = *decision;
    return ok_status();
  }
};

// ---- write_batch
// ---------------------------------------------------------------------------------

struct write_batch::impl {
  const void* owner = nullptr;  // the store whose families the handles are
  cf_handles cf{};
  rocksdb::ColumnFamilyHandle* default_cf = nullptr;  // holds the in-progress turns
  rocksdb::WriteBatch batch;
  std::size_t groups = 0;
  std::size_t records = 0;

  // Applies `puts` to a copy point: on the first failure the batch is rolled back to where it was.
  template <class F>
  status guarded(F&& puts) {
    batch.SetSavePoint();
    auto s = puts();
    if (!s.ok()) {
      // Only fails without a save point, and one was set just above.
      (void)batch.RollbackToSavePoint();
      return error{"write batch: " + s.ToString()};
    }
    (void)batch.PopSavePoint();  // as above: the save point exists
    return ok_status();
  }
};

write_batch::write_batch(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
write_batch::write_batch(write_batch&&) noexcept = default;
write_batch& write_batch::operator=(write_batch&&) noexcept = default;
write_batch::~write_batch() = default;

status write_batch::put_run(const run_record& run) {
  if (auto s = validate(run); !s) {
    return s;
  }
  const auto value = encode(run);
  auto s = impl_->guarded(
      [&] { return impl_->batch.Put(impl_->cf[cf_runs], keys::run(run.id), value); });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_group(const group_record& group) {
  if (auto s = validate(group); !s) {
    return s;
  }
  const auto ref = ref_of(group);
  const auto value = encode(group);
  auto s = impl_->guarded([&] {
    auto st = impl_->batch.Put(impl_->cf[cf_groups], keys::group(ref), value);
    if (st.ok()) {
      st = impl_->batch.Put(impl_->cf[cf_by_task], keys::task(group.task_id, ref), "");
    }
    // The group's in-progress turns go with the same commit: a reader sees the turns or the
    // group, never both and never neither.
    if (st.ok()) {
      const auto turns = keys::turns_of_group(ref);
      st = impl_->batch.DeleteRange(impl_->default_cf, turns, keys::prefix_end(turns));
    }
    // The optimisation decision goes with the group it ruled, under a key of its own so that the
    // group record's bytes (and every build that reads them) stay as they were.
    if (st.ok() && group.optimise) {
      st = impl_->batch.Put(impl_->default_cf, keys::optimise(ref),
                            encode_optimise(*group.optimise));
    }
    return st;
  });
  if (s) {
    ++impl_->groups;
    ++impl_->records;
  }
  return s;
}

status write_batch::put_turn(const group_ref& group, std::uint32_t rollout, std::uint32_t turn,
                             const turn_record& record) {
  if (group.run_id.empty() || group.run_id.find('\0') != std::string::npos) {
    return error{"turn of " + describe(group) + ": run id is empty or contains a NUL byte"};
  }
  if (record.output_logprobs.size() != record.output_tokens.size()) {
    return error{"turn " + std::to_string(turn) + " of rollout " + std::to_string(rollout) +
                 " of " + describe(group) + ": " + std::to_string(record.output_tokens.size()) +
                 " output tokens but " + std::to_string(record.output_logprobs.size()) +
                 " log-probs"};
  }
  const auto value = encode(record);
  auto s = impl_->guarded(
      [&] { return impl_->batch.Put(impl_->default_cf, keys::turn(group, rollout, turn), value); });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_retry(std::string_view run_id, const retry_step_record& retry) {
  if (run_id.empty() || run_id.find('\0') != std::string_view::npos) {
    return error{"retry buffer after step " + std::to_string(retry.step) +
                 ": run id is empty or contains a NUL byte"};
  }
  const auto value = encode(retry);
  auto s = impl_->guarded(
      [&] { return impl_->batch.Put(impl_->default_cf, keys::retry(run_id, retry.step), value); });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_profile(const turn_profile_record& profile) {
  const auto& t = profile.turn;
  if (t.run_id.empty() || t.run_id.find('\0') != std::string_view::npos) {
    return error{"profile of step " + std::to_string(t.step) + " group " + std::to_string(t.group) +
                 " rollout " + std::to_string(t.rollout) + " turn " + std::to_string(t.turn) +
                 ": run id is empty or contains a NUL byte"};
  }
  const auto value = encode(profile);
  const group_ref ref{t.run_id, t.step, t.split, t.group};
  auto s = impl_->guarded([&] {
    return impl_->batch.Put(impl_->default_cf, keys::profile(ref, t.rollout, t.turn), value);
  });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_carry(std::string_view run_id, const partial_carry_record& carry) {
  if (run_id.empty() || run_id.find('\0') != std::string_view::npos) {
    return error{"carry decision of step " + std::to_string(carry.step) +
                 ": run id is empty or contains a NUL byte"};
  }
  const auto value = encode(carry);
  auto s = impl_->guarded(
      [&] { return impl_->batch.Put(impl_->default_cf, keys::carry(run_id, carry.step), value); });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_step(const step_record& step) {
  if (auto s = validate(step); !s) {
    return s;
  }
  const auto value = encode(step);
  auto s = impl_->guarded([&] {
    auto st = impl_->batch.Put(impl_->cf[cf_steps], keys::step(step.run_id, step.step), value);
    for (auto it = step.metrics.begin(); st.ok() && it != step.metrics.end(); ++it) {
      st = impl_->batch.Put(impl_->cf[cf_metrics], keys::metric(step.run_id, it->first, step.step),
                            le_bytes(std::bit_cast<std::uint64_t>(it->second), 8));
    }
    return st;
  });
  if (s) {
    ++impl_->records;
  }
  return s;
}

status write_batch::put_metric(std::string_view run_id, std::uint64_t step, std::string_view name,
                               double value) {
  if (run_id.empty() || run_id.find('\0') != std::string_view::npos) {
    return error{"metric '" + std::string(name) + "': run id is empty or contains a NUL byte"};
  }
  if (name.empty() || name.find('\0') != std::string_view::npos) {
    return error{"metric of run '" + std::string(run_id) +
                 "': metric name is empty or contains a NUL byte"};
  }
  auto s = impl_->guarded([&] {
    return impl_->batch.Put(impl_->cf[cf_metrics], keys::metric(run_id, name, step),
                            le_bytes(std::bit_cast<std::uint64_t>(value), 8));
  });
  if (s) {
    ++impl_->records;
  }
  return s;
}

std::size_t write_batch::groups() const { return impl_->groups; }
std::size_t write_batch::records() const { return impl_->records; }
std::size_t write_batch::bytes() const { return impl_->batch.GetDataSize(); }

void write_batch::clear() {
  impl_->batch.Clear();
  impl_->groups = 0;
  impl_->records = 0;
}

// ---- open / close
// --------------------------------------------------------------------------------

trajectory_store::trajectory_store(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

trajectory_store::~trajectory_store() {
  // Deliberately dropped: a destructor cannot report it; callers who care call close() first.
  (void)impl_->close();
}

namespace {

// Every block of every table file read and its checksum checked; the refusal names the file.
// A store whose table files failed a check (the status names the file): refused, like a store
// without CURRENT, pointing at repair-store.
error damage_refusal(const std::filesystem::path& path, const std::string& where,
                     const rocksdb::Status& s) {
  const std::string text = s.ToString();
  std::string file = "a file of the store";
  if (const auto end = text.find(".sst"); end != std::string::npos) {
    auto begin = text.find_last_of(" /", end);
    begin = begin == std::string::npos ? 0 : begin + 1;
    file = "table file " + (path / text.substr(begin, end + 4 - begin)).string();
  }
  return error{where + ": " + file + " is damaged (" + text +
               "); nothing in the folder was changed and nothing was compacted. To recover what "
               "the other files hold into a copy, run `leap repair-store " +
               path.string() +
               " COPY`, check the copy, then move the damaged folder aside and the copy into its "
               "place"};
}

std::optional<error> verify_tables(const std::filesystem::path& path, const std::string& where,
                                   rocksdb::DB& db) {
  const auto s = db.VerifyChecksum();
  if (s.ok()) {
    return std::nullopt;
  }
  return damage_refusal(path, where, s);
}

}  // namespace

result<std::unique_ptr<trajectory_store>> trajectory_store::open(const std::filesystem::path& path,
                                                                 const store_options& options) {
  auto state = std::make_unique<impl>();
  state->path = path;
  state->options = options;
  const bool may_create = options.create_if_missing && !options.read_only;

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = may_create;
  db_options.create_missing_column_families = !options.read_only;
  db_options.keep_log_file_num = 4;
  db_options.max_background_jobs = 2;
  // RocksDB starts this many threads per column family at every open (16 by default), which
  // made an open take hundreds of milliseconds on a small host.
  db_options.max_file_opening_threads = 2;

  std::error_code ec;
  bool exists = std::filesystem::exists(path / "CURRENT", ec);
  // RocksDB would create a fresh database over a folder whose CURRENT is gone, and delete the old
  // table files and log at the next open: a store is created only where the folder is missing or
  // empty. A folder with files but no CURRENT is not a store being created (that happens beside
  // it, see create_beside): it is damaged, or not a store, unless a process holds its LOCK.
  auto refuse_without_current = [&]() -> error {
    if (const auto holder = lock_holder(path)) {
      return in_use(state->where(), holder);
    }
    if (folder_lock::held_elsewhere(path)) {
      return in_use(state->where(), std::nullopt);
    }
    std::size_t count = 0;
    const auto entries = list_entries(path, &count);
    if (only_creation_leftovers(path)) {
      return error{state->where() + ": the folder holds " + std::to_string(count) + " files (" +
                   entries +
                   ") and no CURRENT file: what a store's creation writes before it was "
                   "interrupted, and no data. Nothing in it was changed; a writable open (`leap "
                   "run`) makes the store anew there"};
    }
    return error{state->where() + ": the folder holds " + std::to_string(count) + " files (" +
                 entries +
                 ") but no CURRENT file, so it is a damaged RocksDB database (or not a store); "
                 "nothing in it was changed. To recover what it holds into a copy, run `leap "
                 "repair-store " +
                 path.string() +
                 " COPY`, check the copy, then move the damaged "
                 "folder aside and the copy into its place"};
  };
  // Held from before RocksDB writes into the folder until this open returns, where the store is
  // made in its folder (see folder_lock).
  std::optional<folder_lock> making;
  // What an interrupted creation left (no data, and nobody making the store now) is removed under
  // the folder's lock, so the store is made as in an empty folder. Whether the folder is then made
  // beside or in place, only one process made it.
  auto remove_leftovers = [&]() -> status {
    std::vector<std::filesystem::path> leftovers;
    for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end;
         it.increment(ec)) {
      leftovers.push_back(it->path());
    }
    for (const auto& file : leftovers) {
      if (!std::filesystem::remove(file, ec) && ec) {
        return error{state->where() + ": cannot remove " + file.string() +
                     ", left by an interrupted creation: " + ec.message()};
      }
    }
    return ok_status();
  };
  auto clear_interrupted_creation = [&]() -> result<bool> {
    if (!may_create || !only_creation_leftovers(path) || lock_holder(path)) {
      return false;
    }
    auto locked = folder_lock::try_exclusive(path);
    if (!locked) {
      return locked.err();
    }
    if (!*locked || lock_holder(path) || std::filesystem::exists(path / "CURRENT", ec) ||
        !only_creation_leftovers(path)) {
      return false;
    }
    making = std::move(*locked);
    if (auto removed = remove_leftovers(); !removed) {
      return removed.err();
    }
    return true;
  };
  if (!exists && std::filesystem::is_directory(path, ec) && !folder_is_empty(path)) {
    auto cleared = clear_interrupted_creation();
    if (!cleared) {
      return cleared.err();
    }
    if (!*cleared) {
      return refuse_without_current();
    }
  }
  if (!exists && !may_create) {
    return error{state->where() + ": no trajectory store there" +
                 (options.read_only ? "" : " (and create_if_missing is off)")};
  }
  bool in_place = false;
  if (!exists) {
    auto created =
        create_beside(path, rocksdb::Options(db_options, family_options()), state->where());
    if (!created) {
      return created.err();
    }
    in_place = *created == creation::in_place;
    if (in_place && !making) {
      std::filesystem::create_directories(path, ec);
      if (ec) {
        return error{state->where() + ": cannot create the folder: " + ec.message()};
      }
      auto locked = folder_lock::try_exclusive(path);
      if (!locked) {
        return error{state->where() + ": " + locked.err().message};
      }
      if (!*locked) {
        return in_use(state->where(), std::nullopt);
      }
      making = std::move(*locked);
      // Another process may have made the store, or begun and died, before the lock was ours.
      exists = std::filesystem::exists(path / "CURRENT", ec);
      in_place = !exists;
      if (!exists && !folder_is_empty(path)) {
        if (!only_creation_leftovers(path) || lock_holder(path)) {
          making.reset();  // the refusal asks whether another process holds the folder
          return refuse_without_current();
        }
        if (auto removed = remove_leftovers(); !removed) {
          return removed.err();
        }
      }
    }
    if (!in_place) {
      // This process's new store, or the one another process moved there first.
      exists = std::filesystem::exists(path / "CURRENT", ec);
      if (!exists && std::filesystem::is_directory(path, ec) && !folder_is_empty(path)) {
        return refuse_without_current();
      }
      if (!exists) {
        return error{state->where() + ": the new store was moved or removed as it was created"};
      }
    }
  }
  db_options.create_if_missing = in_place;
  // While another process holds the LOCK, a failure of the first look (below) may be that
  // process's open at work (it replaces MANIFEST and log files as it recovers); a writable open
  // would be refused anyway: the store is in use.
  auto in_use_instead = [&](error failure) -> error {
    if (options.read_only) {
      return failure;
    }
    if (const auto holder = other_lock_holder(path)) {
      return in_use(state->where(), holder);
    }
    return failure;
  };
  std::vector<std::string> families;
  if (exists) {
    auto s = rocksdb::DB::ListColumnFamilies(db_options, path.string(), &families);
    if (!s.ok()) {
      return in_use_instead(state->fail("list column families", s));
    }
  } else {
    // Where a store cannot be made beside its folder: made in it, as RocksDB does.
    std::filesystem::create_directories(path, ec);
    if (ec) {
      return error{state->where() + ": cannot create the folder: " + ec.message()};
    }
  }

  // RocksDB opens every family or none, so families of a later layout are opened too.
  std::vector<std::string> names = {rocksdb::kDefaultColumnFamilyName};
  for (const char* name : cf_names) {
    const bool present = std::find(families.begin(), families.end(), name) != families.end();
    if (exists && !present && options.read_only) {
      return error{state->where() + ": column family '" + name +
                   "' is missing; is this a trajectory store?"};
    }
    names.emplace_back(name);
  }
  for (const auto& name : families) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  }
  const auto family = family_options();
  // A writable open compacts nothing until the table files passed their check (see below).
  auto opened_family = family;
  opened_family.disable_auto_compactions = !options.read_only;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.reserve(names.size());
  for (const auto& name : names) {
    descriptors.emplace_back(name, opened_family);
  }

  // The mark is read before the database opens, so that a read-only open beside a live writer
  // compares against a mark no newer than the log it then reads.
  auto mark = exists ? read_mark(path / acknowledged_mark_file) : result<mark_state>(mark_state{});
  if (!mark) {
    return error{state->where() + ": " + mark.err().message};
  }

  rocksdb::DB* raw = nullptr;
  const rocksdb::Options combined(db_options, family);
  // Lost acknowledged writes: the mark names a write the database no longer holds. A writable
  // open recovers the log and flushes it, which would rewrite the damaged files, so the check
  // reads the store read-only first.
  //
  // Damaged table files: RocksDB reads a table's blocks only when a read needs them, so a flipped
  // byte in one would be found by some later read, or by a compaction, which then fails the
  // store's writes after rewriting the other tables. Every block's checksum is checked at open,
  // in that same read-only open, before anything may write (measured in the README).
  std::optional<std::uint64_t> probed;
  std::optional<error> damaged;
  if (!options.read_only && exists) {
    std::vector<rocksdb::ColumnFamilyDescriptor> present_families;
    present_families.reserve(families.size());
    for (const auto& name : families) {
      present_families.emplace_back(name, family);
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    auto ps =
        rocksdb::DB::OpenForReadOnly(combined, path.string(), present_families, &handles, &raw);
    if (!ps.ok()) {
      // Opening reads each table file's footer and index: damage there shows here.
      return in_use_instead(ps.IsCorruption() ? damage_refusal(path, state->where(), ps)
                                              : state->fail("open", ps));
    }
    probed = raw->GetLatestSequenceNumber();
    damaged = verify_tables(path, state->where(), *raw);
    for (auto* h : handles) {
      (void)raw->DestroyColumnFamilyHandle(h);  // read-only: cannot fail
    }
    (void)raw->Close();  // read-only: nothing to lose
    delete raw;
    raw = nullptr;
  }
  auto loss = [&](std::uint64_t present) -> std::optional<lost_writes_report> {
    if (!mark->present || (mark->valid && mark->seq <= present)) {
      return std::nullopt;
    }
    lost_writes_report report;
    report.acknowledged = mark->seq;
    report.present = present;
    report.mark_unreadable = !mark->valid;
    return report;
  };
  auto refusal = [&](const lost_writes_report& report) {
    return error{state->where() + ": " + report.describe() +
                 ". Nothing was changed. To go on with what it holds (a run redoes the lost "
                 "groups), open it accepting the loss: `leap run --accept-lost-writes`; `leap "
                 "replay` and `leap export` warn and read on. Copy the folder first to keep the "
                 "damaged state"};
  };
  if (damaged) {
    return in_use_instead(*damaged);
  }
  if (probed) {
    state->lost = loss(*probed);
    if (state->lost && !options.accept_lost_writes) {
      return in_use_instead(refusal(*state->lost));
    }
  }

  rocksdb::Options open_options = combined;
  if (!options.read_only) {
    // A read-only open writes no info log; a writable one writes it through store_log.
    open_options.info_log = std::make_shared<store_log>(path);
    open_options.listeners.push_back(std::make_shared<no_auto_recovery>());
  }
  const auto s =
      options.read_only
          ? rocksdb::DB::OpenForReadOnly(open_options, path.string(), descriptors,
                                         &state->all_handles, &raw)
          : rocksdb::DB::Open(open_options, path.string(), descriptors, &state->all_handles, &raw);
  if (!s.ok()) {
    if (s.IsCorruption()) {
      return damage_refusal(path, state->where(), s);
    }
    if (lock_conflict(s)) {
      // The holder may have ended since; it held the lock a moment ago.
      return in_use(state->where(), other_lock_holder(path));
    }
    auto err = state->fail("open", s);
    if (s.IsIOError() && !options.read_only) {
      // Opening recovers the log into table files: a full disk fails here until space is freed.
      err.message += "; the store has " + describe_free_space(path.string());
    }
    return err;
  }
  state->db.reset(raw);
  // descriptors[0] is the default family; ours follow in cf_names order.
  for (std::size_t i = 0; i < cf_count; ++i) {
    state->cf[i] = state->all_handles[i + 1];
  }

  if (options.read_only) {
    if (auto refused = verify_tables(path, state->where(), *state->db)) {
      (void)state->close();  // the damage is the one to report
      return *refused;
    }
    state->lost = loss(state->db->GetLatestSequenceNumber());
    if (state->lost && !options.accept_lost_writes) {
      auto err = refusal(*state->lost);
      (void)state->close();  // the loss is the one to report
      return err;
    }
  }
  if (!options.read_only) {
    for (auto* handle : state->all_handles) {
      const auto cs = state->db->SetOptions(handle, {{"disable_auto_compactions", "false"}});
      if (!cs.ok()) {
        auto err = state->fail("turn compactions on", cs);
        (void)state->close();  // the options error is the one to report
        return err;
      }
    }
  }
  // The layout version: written on creation, checked on every open.
  rocksdb::ReadOptions read;
  std::string version;
  auto* default_cf = state->all_handles[0];
  auto vs = state->db->Get(read, default_cf, schema_key, &version);
  if (vs.IsNotFound() && !options.read_only) {
    rocksdb::WriteOptions write;
    write.sync = options.sync;
    vs = state->db->Put(write, default_cf, schema_key, le_bytes(store_schema_version, 4));
    if (!vs.ok()) {
      auto err = state->stop_writes("write the schema version", vs, 4);
      (void)state->close();  // the write error is the one to report
      return err;
    }
  } else if (vs.ok()) {
    const auto v = version.size() == 4 ? from_le(version) : 0;
    if (v == 0 || v > store_schema_version) {
      auto err = error{state->where() + ": schema version " + std::to_string(v) +
                       " is not readable by this build (it reads up to " +
                       std::to_string(store_schema_version) + ")"};
      (void)state->close();  // the version mismatch is the one to report
      return err;
    }
  } else if (!vs.IsNotFound()) {
    auto err = state->fail("read the schema version", vs);
    (void)state->close();  // the read error is the one to report
    return err;
  }

  if (!options.read_only) {
    const auto file = path / acknowledged_mark_file;
    if (!mark->present) {
      if (auto made = write_new_mark(path, state->db->GetLatestSequenceNumber(), options.sync);
          !made) {
        (void)state->close();  // the mark error is the one to report
        return error{state->where() + ": " + made.err().message + "; the store has " +
                     describe_free_space(path.string())};
      }
    }
    state->mark_fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (state->mark_fd < 0) {
      auto err =
          error{state->where() + ": cannot open " + file.string() + ": " + std::strerror(errno) +
                "; the store has " + describe_free_space(path.string())};
      (void)state->close();  // the mark error is the one to report
      return err;
    }
    // Written whole now: the present state once a loss is accepted.
    auto written = state->update_mark(true);
    if (!written) {
      (void)state->close();  // the mark error is the one to report
      return written.err();
    }
  }
  return std::unique_ptr<trajectory_store>(new trajectory_store(std::move(state)));
}

status trajectory_store::close() { return impl_->close(); }

const std::filesystem::path& trajectory_store::path() const { return impl_->path; }
const store_options& trajectory_store::options() const { return impl_->options; }
const std::optional<lost_writes_report>& trajectory_store::lost_writes() const {
  return impl_->lost;
}

// ---- writes
// --------------------------------------------------------------------------------------

write_batch trajectory_store::batch() {
  auto state = std::make_unique<write_batch::impl>();
  state->owner = impl_.get();
  state->cf = impl_->cf;
  state->default_cf = impl_->all_handles.empty() ? nullptr : impl_->all_handles[0];
  return write_batch(std::move(state));
}

status trajectory_store::write(write_batch& batch) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  if (impl_->options.read_only) {
    return error{impl_->where() + ": opened read-only; writes are refused"};
  }
  if (batch.impl_->owner != impl_.get()) {
    return error{impl_->where() + ": write of a batch made by another store"};
  }
  if (batch.empty()) {
    return ok_status();
  }
  if (auto s = impl_->check_writable(); !s) {
    return s;
  }
  rocksdb::WriteOptions write;
  write.sync = impl_->options.sync;
  auto s = impl_->db->Write(write, &batch.impl_->batch);
  if (!s.ok()) {
    return impl_->stop_writes("write of " + std::to_string(batch.records()) + " records", s,
                              batch.bytes());
  }
  batch.clear();
  return impl_->update_mark();
}

namespace {

template <class F>
status write_one(trajectory_store& store, F&& put) {
  auto batch = store.batch();
  if (auto s = put(batch); !s) {
    return s.err().wrap("trajectory store '" + store.path().string() + "'");
  }
  return store.write(batch);
}

}  // namespace

status trajectory_store::put_run(const run_record& run) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_run(run); });
}

status trajectory_store::put_group(const group_record& group) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_group(group); });
}

status trajectory_store::put_turn(const group_ref& group, std::uint32_t rollout, std::uint32_t turn,
                                  const turn_record& record) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_turn(group, rollout, turn, record); });
}

status trajectory_store::put_retry(std::string_view run_id, const retry_step_record& retry) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_retry(run_id, retry); });
}

status trajectory_store::put_profile(const turn_profile_record& profile) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_profile(profile); });
}

status trajectory_store::put_step(const step_record& step) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_step(step); });
}

status trajectory_store::put_step(const step_record& step, const partial_carry_record& carry) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  if (carry.step != step.step) {
    return error{"trajectory store '" + path().string() + "': step " + std::to_string(step.step) +
                 " stored with the carry decision of step " + std::to_string(carry.step)};
  }
  return write_one(*this, [&](write_batch& b) -> status {
    if (auto s = b.put_step(step); !s) {
      return s;
    }
    return b.put_carry(step.run_id, carry);
  });
}

status trajectory_store::put_metric(std::string_view run_id, std::uint64_t step,
                                    std::string_view name, double value) {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  return write_one(*this, [&](write_batch& b) { return b.put_metric(run_id, step, name, value); });
}

// ---- reads
// ---------------------------------------------------------------------------------------

result<std::optional<run_record>> trajectory_store::get_run(std::string_view run_id) const {
  auto bytes = impl_->get(cf_runs, keys::run(run_id));
  if (!bytes) {
    return bytes.err();
  }
  if (!*bytes) {
    return std::optional<run_record>{};
  }
  auto run = decode_run(**bytes);
  if (!run) {
    return run.err().wrap(impl_->where() + ": run '" + std::string(run_id) + "'");
  }
  return std::optional<run_record>{std::move(*run)};
}

result<std::vector<run_record>> trajectory_store::runs() const {
  std::vector<run_record> out;
  auto s =
      impl_->scan(cf_runs, "", "", [&](std::string_view key, std::string_view value) -> status {
        auto run = decode_run(value);
        if (!run) {
          return run.err().wrap(impl_->where() + ": run '" + std::string(key) + "'");
        }
        out.push_back(std::move(*run));
        return ok_status();
      });
  if (!s) {
    return s.err();
  }
  return out;
}

result<std::optional<group_record>> trajectory_store::get_group(const group_ref& ref,
                                                                decode_options decode) const {
  auto bytes = impl_->get(cf_groups, keys::group(ref));
  if (!bytes) {
    return bytes.err();
  }
  if (!*bytes) {
    return std::optional<group_record>{};
  }
  auto group = decode_group(**bytes, decode);
  if (!group) {
    return group.err().wrap(impl_->where() + ": " + describe(ref));
  }
  if (auto s = impl_->attach_optimise(*group, ref); !s) {
    return s.err();
  }
  return std::optional<group_record>{std::move(*group)};
}

status trajectory_store::for_each_group(const group_query& query,
                                        const group_visitor& visit) const {
  std::string lower;
  std::string upper;
  if (!query.run_id.empty()) {
    lower = keys::step(query.run_id, query.first_step);
    upper = query.last_step == std::numeric_limits<std::uint64_t>::max()
                ? keys::prefix_end(keys::id_prefix(query.run_id))
                : keys::step(query.run_id, query.last_step + 1);
  }
  return impl_->scan(cf_groups, lower, upper,
                     [&](std::string_view key, std::string_view value) -> status {
                       const auto ref = keys::parse_group(key);
                       if (!ref) {
                         return error{impl_->where() + ": a key of 'groups' is not a group key"};
                       }
                       if (ref->step < query.first_step || ref->step > query.last_step ||
                           (query.split && ref->split != *query.split)) {
                         return ok_status();
                       }
                       auto group = decode_group(value, query.decode);
                       if (!group) {
                         return group.err().wrap(impl_->where() + ": " + describe(*ref));
                       }
                       if (auto s = impl_->attach_optimise(*group, *ref); !s) {
                         return s;
                       }
                       return visit(std::move(*group));
                     });
}

result<std::vector<group_record>> trajectory_store::groups(const group_query& query) const {
  std::vector<group_record> out;
  auto s = for_each_group(query, [&](group_record&& g) {
    out.push_back(std::move(g));
    return ok_status();
  });
  if (!s) {
    return s.err();
  }
  return out;
}

status trajectory_store::for_each_group_of_task(std::string_view task_id, std::string_view run_id,
                                                const group_visitor& visit,
                                                decode_options decode) const {
  if (auto s = impl_->check_open(); !s) {
    return s;
  }
  auto prefix = keys::id_prefix(task_id);
  if (!run_id.empty()) {
    prefix += keys::id_prefix(run_id);
  }
  // Index and groups are read from one snapshot, so a group written meanwhile is seen whole or not.
  const rocksdb::Snapshot* snapshot = impl_->db->GetSnapshot();
  rocksdb::ReadOptions read;
  read.snapshot = snapshot;
  const auto upper = keys::prefix_end(prefix);
  rocksdb::Slice upper_slice(upper);
  read.iterate_upper_bound = &upper_slice;
  status outcome = ok_status();
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(read, impl_->cf[cf_by_task]));
    for (it->Seek(prefix); it->Valid() && outcome.ok(); it->Next()) {
      const auto parsed = keys::parse_task(view(it->key()));
      if (!parsed) {
        outcome = error{impl_->where() + ": a key of 'by_task' is not an index key"};
        break;
      }
      auto bytes = impl_->get(cf_groups, keys::group(parsed->second), snapshot);
      if (!bytes) {
        outcome = bytes.err();
        break;
      }
      if (!*bytes) {
        // Groups and their entries are written together and never deleted: this is damage.
        outcome = error{impl_->where() + ": the task index names " + describe(parsed->second) +
                        ", which is not stored"};
        break;
      }
      auto group = decode_group(**bytes, decode);
      if (!group) {
        outcome = group.err().wrap(impl_->where() + ": " + describe(parsed->second));
        break;
      }
      if (group->task_id != task_id) {
        continue;  // the group was rewritten with another task: a stale index entry
      }
      outcome = impl_->attach_optimise(*group, parsed->second, snapshot);
      if (!outcome.ok()) {
        break;
      }
      outcome = visit(std::move(*group));
    }
    if (outcome.ok() && !it->status().ok()) {
      outcome = impl_->fail("scan of 'by_task'", it->status());
    }
  }
  impl_->db->ReleaseSnapshot(snapshot);
  return outcome;
}

result<std::optional<step_record>> trajectory_store::get_step(std::string_view run_id,
                                                              std::uint64_t step) const {
  auto bytes = impl_->get(cf_steps, keys::step(run_id, step));
  if (!bytes) {
    return bytes.err();
  }
  if (!*bytes) {
    return std::optional<step_record>{};
  }
  auto record = decode_step(**bytes);
  if (!record) {
    return record.err().wrap(impl_->where() + ": step " + std::to_string(step) + " of run '" +
                             std::string(run_id) + "'");
  }
  return std::optional<step_record>{std::move(*record)};
}

result<std::vector<step_record>> trajectory_store::steps(std::string_view run_id,
                                                         std::uint64_t first,
                                                         std::uint64_t last) const {
  std::vector<step_record> out;
  if (first > last) {
    return out;
  }
  const auto upper = last == std::numeric_limits<std::uint64_t>::max()
                         ? keys::prefix_end(keys::id_prefix(run_id))
                         : keys::step(run_id, last + 1);
  auto s =
      impl_->scan(cf_steps, keys::step(run_id, first), upper,
                  [&](std::string_view key, std::string_view value) -> status {
                    auto record = decode_step(value);
                    if (!record) {
                      const auto parsed = keys::parse_step(key);
                      return record.err().wrap(impl_->where() + ": step " +
                                               (parsed ? std::to_string(parsed->second) : "?") +
                                               " of run '" + std::string(run_id) + "'");
                    }
                    out.push_back(std::move(*record));
                    return ok_status();
                  });
  if (!s) {
    return s.err();
  }
  return out;
}

result<std::vector<metric_point>> trajectory_store::metric_series(std::string_view run_id,
                                                                  std::string_view name) const {
  std::vector<metric_point> out;
  auto prefix = keys::id_prefix(run_id) + keys::id_prefix(name);
  auto s = impl_->scan(cf_metrics, prefix, keys::prefix_end(prefix),
                       [&](std::string_view key, std::string_view value) -> status {
                         const auto parsed = keys::parse_metric(key);
                         if (!parsed || value.size() != 8) {
                           return error{impl_->where() + ": metric '" + std::string(name) +
                                        "' of run '" + std::string(run_id) + "': malformed entry"};
                         }
                         out.push_back({parsed->step, std::bit_cast<double>(from_le(value))});
                         return ok_status();
                       });
  if (!s) {
    return s.err();
  }
  return out;
}

result<std::vector<std::string>> trajectory_store::metric_names(std::string_view run_id) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  std::vector<std::string> out;
  const auto prefix = keys::id_prefix(run_id);
  const auto upper = keys::prefix_end(prefix);
  rocksdb::ReadOptions read;
  rocksdb::Slice upper_slice(upper);
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(read, impl_->cf[cf_metrics]));
  // One seek per name: jump past all steps of a name to the next name.
  for (it->Seek(prefix); it->Valid();) {
    const auto parsed = keys::parse_metric(view(it->key()));
    if (!parsed) {
      return error{impl_->where() + ": a key of 'metrics' is not a metric key"};
    }
    out.push_back(parsed->name);
    it->Seek(keys::prefix_end(prefix + keys::id_prefix(parsed->name)));
  }
  if (!it->status().ok()) {
    return impl_->fail("scan of 'metrics'", it->status());
  }
  return out;
}

// ---- resume
// --------------------------------------------------------------------------------------

result<std::vector<std::uint32_t>> trajectory_store::completed_groups(std::string_view run_id,
                                                                      std::uint64_t step,
                                                                      split_kind split) const {
  std::vector<std::uint32_t> out;
  const auto prefix = keys::step(run_id, step);
  auto s = impl_->scan(cf_groups, prefix, keys::prefix_end(prefix),
                       [&](std::string_view key, std::string_view) -> status {
                         const auto ref = keys::parse_group(key);
                         if (!ref) {
                           return error{impl_->where() + ": a key of 'groups' is not a group key"};
                         }
                         if (ref->split == split) {
                           out.push_back(ref->group_index);
                         }
                         return ok_status();
                       });
  if (!s) {
    return s.err();
  }
  return out;
}

result<std::vector<stored_turn>> trajectory_store::partial_turns(std::string_view run_id) const {
  std::vector<stored_turn> out;
  const auto prefix = keys::turns_of_run(run_id);
  auto scanned = impl_->scan(
      impl_->all_handles.empty() ? nullptr : impl_->all_handles[0], "the in-progress turns", prefix,
      keys::prefix_end(prefix), [&](std::string_view k, std::string_view v) -> status {
        auto key = keys::parse_turn(k);
        if (!key) {
          return error{impl_->where() + ": a key under the turn prefix is not a turn key"};
        }
        auto record = decode_turn(v);
        if (!record) {
          return record.err().wrap(impl_->where() + ": turn " + std::to_string(key->turn) +
                                   " of rollout " + std::to_string(key->rollout) + " of " +
                                   describe(key->group));
        }
        out.push_back({std::move(key->group), key->rollout, key->turn, std::move(*record)});
        return ok_status();
      });
  if (!scanned) {
    return scanned.err();
  }
  return out;
}

namespace {

// The records of a per-step kind (retry buffers, carry decisions) whose keys start with `prefix`
// (a run's, or one step's), ascending. `parse` reads a key, `decode` a value; `what` names them.
template <class Record, class Parse, class Decode>
result<std::vector<Record>> scan_step_records(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family,
                                              const std::string& prefix, const std::string& where,
                                              const std::string& what, Parse parse, Decode decode) {
  std::vector<Record> out;
  const auto upper = keys::prefix_end(prefix);
  rocksdb::ReadOptions read;
  rocksdb::Slice upper_slice(upper);
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(read, family));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    auto key = parse(view(it->key()));
    if (!key) {
      return error{where + ": a key under the " + what + " prefix is not a " + what + " key"};
    }
    auto record = decode(view(it->value()));
    if (!record) {
      return record.err().wrap(where + ": " + what + " of step " + std::to_string(key->second) +
                               " of run '" + key->first + "'");
    }
    out.push_back(std::move(*record));
  }
  if (!it->status().ok()) {
    return error{where + ": scan of the " + what + "s: " + it->status().ToString()};
  }
  return out;
}

result<std::vector<retry_step_record>> scan_retries(rocksdb::DB& db,
                                                    rocksdb::ColumnFamilyHandle* family,
                                                    const std::string& prefix,
                                                    const std::string& where) {
  return scan_step_records<retry_step_record>(db, family, prefix, where, "retry buffer",
                                              keys::parse_retry, decode_retry);
}

result<std::vector<partial_carry_record>> scan_carries(rocksdb::DB& db,
                                                       rocksdb::ColumnFamilyHandle* family,
                                                       const std::string& prefix,
                                                       const std::string& where) {
  return scan_step_records<partial_carry_record>(db, family, prefix, where, "carry decision",
                                                 keys::parse_carry, decode_carry);
}

}  // namespace

result<std::vector<retry_step_record>> trajectory_store::retry_steps(
    std::string_view run_id) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  return scan_retries(*impl_->db, impl_->all_handles[0], keys::retries_of_run(run_id),
                      impl_->where());
}

result<std::optional<retry_step_record>> trajectory_store::get_retry(std::string_view run_id,
                                                                     std::uint64_t step) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  auto found =
      scan_retries(*impl_->db, impl_->all_handles[0], keys::retry(run_id, step), impl_->where());
  if (!found) {
    return found.err();
  }
  if (found->empty()) {
    return std::optional<retry_step_record>{};
  }
  return std::optional<retry_step_record>{std::move(found->front())};
}

result<std::vector<partial_carry_record>> trajectory_store::carry_steps(
    std::string_view run_id) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  return scan_carries(*impl_->db, impl_->all_handles[0], keys::carries_of_run(run_id),
                      impl_->where());
}

result<std::optional<partial_carry_record>> trajectory_store::get_carry(std::string_view run_id,
                                                                        std::uint64_t step) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  auto found =
      scan_carries(*impl_->db, impl_->all_handles[0], keys::carry(run_id, step), impl_->where());
  if (!found) {
    return found.err();
  }
  if (found->empty()) {
    return std::optional<partial_carry_record>{};
  }
  return std::optional<partial_carry_record>{std::move(found->front())};
}

result<std::vector<turn_profile_record>> trajectory_store::profiles(std::string_view run_id) const {
  std::vector<turn_profile_record> out;
  const auto prefix = keys::profiles_of_run(run_id);
  auto scanned = impl_->scan(
      impl_->all_handles.empty() ? nullptr : impl_->all_handles[0], "the profiles", prefix,
      keys::prefix_end(prefix), [&](std::string_view k, std::string_view v) -> status {
        auto key = keys::parse_profile(k);
        if (!key) {
          return error{impl_->where() + ": a key under the profile prefix is not a profile key"};
        }
        auto record = decode_profile(v);
        if (!record) {
          return record.err().wrap(
              impl_->where() + ": profile of step " + std::to_string(key->group.step) + " " +
              to_string(key->group.split) + " group " + std::to_string(key->group.group_index) +
              " rollout " + std::to_string(key->rollout) + " turn " + std::to_string(key->turn) +
              " of run '" + key->group.run_id + "'");
        }
        record->turn = turn_ref{std::move(key->group.run_id), key->group.step, key->group.split,
                                key->group.group_index,       key->rollout,    key->turn};
        out.push_back(std::move(*record));
        return ok_status();
      });
  if (!scanned) {
    return scanned.err();
  }
  return out;
}

result<std::optional<std::uint64_t>> trajectory_store::last_completed_step(
    std::string_view run_id) const {
  if (auto s = impl_->check_open(); !s) {
    return s.err();
  }
  const auto prefix = keys::id_prefix(run_id);
  const auto upper = keys::prefix_end(prefix);
  rocksdb::ReadOptions read;
  rocksdb::Slice upper_slice(upper);
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(read, impl_->cf[cf_steps]));
  it->SeekToLast();  // with an upper bound: the last key below it
  if (!it->status().ok()) {
    return impl_->fail("scan of 'steps'", it->status());
  }
  if (!it->Valid() || !it->key().starts_with(prefix)) {
    return std::optional<std::uint64_t>{};
  }
  const auto parsed = keys::parse_step(view(it->key()));
  if (!parsed) {
    return error{impl_->where() + ": a key of 'steps' is not a step key"};
  }
  return std::optional<std::uint64_t>{parsed->second};
}

}  // namespace leap

namespace leap {

result<repair_report> repair_store_copy(const std::filesystem::path& damaged,
                                        const std::filesystem::path& copy) {
  const std::string where = "repair of '" + damaged.string() + "' into '" + copy.string() + "'";
  std::error_code ec;
  if (!std::filesystem::is_directory(damaged, ec)) {
    return error{where + ": '" + damaged.string() + "' is not a folder"};
  }
  if (std::filesystem::exists(copy, ec) &&
      !(std::filesystem::is_directory(copy, ec) && folder_is_empty(copy))) {
    return error{where + ": '" + copy.string() + "' exists and is not an empty folder"};
  }
  std::filesystem::create_directories(copy, ec);
  if (ec) {
    return error{where + ": cannot create '" + copy.string() + "': " + ec.message()};
  }
  std::filesystem::copy(damaged, copy, std::filesystem::copy_options::recursive, ec);
  if (ec) {
    return error{where + ": copy failed: " + ec.message()};
  }
  std::filesystem::remove(copy / "LOCK", ec);  // the damaged store's lock is not the copy's

  rocksdb::DBOptions db_options;
  db_options.max_file_opening_threads = 2;
  db_options.info_log = std::make_shared<store_log>(copy);  // see store_log: a full disk
  const auto family = family_options();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, family);
  for (const char* name : cf_names) {
    descriptors.emplace_back(name, family);
  }
  const auto s = rocksdb::RepairDB(copy.string(), db_options, descriptors, family);
  if (!s.ok()) {
    return error{where + ": RocksDB's repair failed: " + s.ToString()};
  }

  store_options options;
  options.create_if_missing = false;
  options.accept_lost_writes = true;
  auto store = trajectory_store::open(copy, options);
  if (!store) {
    return store.err().wrap(where + ": the repaired copy does not open");
  }
  repair_report report;
  report.lost = (*store)->lost_writes();
  auto runs = (*store)->runs();
  if (!runs) {
    return runs.err().wrap(where);
  }
  report.runs = runs->size();
  for (const auto& run : *runs) {
    auto steps = (*store)->steps(run.id);
    if (!steps) {
      return steps.err().wrap(where);
    }
    report.steps += steps->size();
  }
  group_query every;
  every.decode.tokens = false;
  auto counted = (*store)->for_each_group(every, [&](group_record&&) -> status {
    ++report.groups;
    return ok_status();
  });
  if (!counted) {
    return counted.err().wrap(where);
  }
  if (auto closed = (*store)->close(); !closed) {
    return closed.err().wrap(where);
  }
  return report;
}

}  // namespace leap

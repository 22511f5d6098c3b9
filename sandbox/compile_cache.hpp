// A content-addressed, size-bounded compile cache on disk, with in-flight de-duplication: callers
// asking for the same key while it is being built wait for that one build.
#pragma once

#include "common/enums/verdict_category.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

namespace leap::sandbox {

// What a build produced: an artifact (executable, object) or the reason it failed (compiler log).
// Failures are cached too (the same source fails the same way), except timeouts, which may
// depend on the host's load.
struct build_output {
  bool ok = false;
  std::string artifact;  // the bytes of the built file when ok
  std::string log;       // the compiler's output (stderr + stdout), host paths not yet stripped
  bool timed_out = false;
  // Set when the build's own checks decided the verdict (ok is then false): its category
  // (forbidden or compile) and feedback. Cached like any other outcome, the category by its name.
  std::optional<verdict_category> refusal_category;
  std::string refusal;
};

struct cache_lookup {
  build_output output;
  bool hit = false;     // served from disk or memory without building
  bool shared = false;  // waited for an identical build already in flight
  double build_ms = 0;  // time spent building (0 on a hit)
};

// A folder kept whole under dir()/folders/<key>: what builds read in place (a precompiled header
// of hundreds of MB), never loaded into memory or copied per use.
struct folder_lookup {
  bool ok = false;
  std::filesystem::path path;  // the folder, when ok
  std::string log;             // why there is none, or the build's log when this call built it
  bool hit = false;            // it was there already
  bool shared = false;         // waited for the same build in flight
  double build_ms = 0;
};

class compile_cache {
 public:
  // `dir` is created if needed; entries already there are indexed (oldest mtime evicted first).
  // `max_bytes` bounds the bytes on disk (Default in verifier_config: 2 GiB); 0 disables the disk
  // (in-flight de-duplication still applies).
  static result<std::unique_ptr<compile_cache>> open(const std::filesystem::path& dir,
                                                     std::uint64_t max_bytes);

  // Returns the entry for `key` (a hex digest), building it with `build` when absent. Concurrent
  // calls with one key run `build` once; the others wait for its result. An error from `build`
  // (infrastructure, not a compile failure) is returned to every waiter and not cached; a failed
  // build is cached only with `cache_failures`. Thread-safe.
  result<cache_lookup> get_or_build(const std::string& key,
                                    const std::function<result<build_output>()>& build,
                                    bool cache_failures = true);

  // Removes the entry of `key` from disk and from the index (its caller found it damaged), so that
  // the next get_or_build builds and stores it again. Nothing when absent. Thread-safe.
  void drop(const std::string& key);

  // The folder for `key`, built when absent: `build` fills the empty folder it is given (beside the
  // final one, on the same file system) and says whether it succeeded; a folder that succeeded is
  // renamed into place, so a reader never sees a partial one, and when another process renamed its
  // own first, that one is kept. Concurrent calls in this process run `build` once. A failed build
  // is remembered for the life of this object (not retried: a folder is costly to build), and
  // so is a folder dropped twice. At most `max_folders` are kept, the least recently used removed
  // first; they do not count against max_bytes (their count bounds them). Disabled (ok false)
  // when the disk is (max_bytes 0). Thread-safe.
  result<folder_lookup> get_or_build_folder(
      const std::string& key,
      const std::function<result<build_output>(const std::filesystem::path& aside)>& build,
      std::size_t max_folders = 4);
  // The folder for `key` when it is in place now (not while it is being built, never building it):
  // for a caller that would rather go on without it than wait. Thread-safe.
  [[nodiscard]] std::optional<folder_lookup> find_folder(const std::string& key);
  // Removes the folder of `key` (a user found it damaged): the next call builds it again, once.
  void drop_folder(const std::string& key);
  // Folders built so far by this object. For tests and benchmarks.
  [[nodiscard]] std::uint64_t folder_builds() const;

  [[nodiscard]] std::uint64_t bytes_on_disk() const;
  [[nodiscard]] std::size_t entries() const;
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  // Builds run so far (not hits, not shared waits). For tests and benchmarks.
  [[nodiscard]] std::uint64_t builds() const;
  // Callers waiting now for an identical build (or folder) already in flight. For tests.
  [[nodiscard]] std::size_t waiting() const;

 private:
  compile_cache(std::filesystem::path dir, std::uint64_t max_bytes)
      : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::filesystem::path path_of(const std::string& key) const;
  std::optional<build_output> load(const std::string& key);
  void store(const std::string& key, const build_output& out);
  void touch(const std::string& key);  // caller holds mutex_
  void evict();                        // caller holds mutex_

  std::filesystem::path dir_;
  std::uint64_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;  // front: most recently used
  struct entry_info {
    std::uint64_t bytes;
    std::list<std::string>::iterator position;
  };
  std::unordered_map<std::string, entry_info> index_;
  std::uint64_t total_bytes_ = 0;
  std::uint64_t builds_ = 0;
  std::size_t waiting_ = 0;
  std::map<std::string, std::shared_future<result<build_output>>> in_flight_;
  std::map<std::string, std::shared_future<result<folder_lookup>>> folders_in_flight_;
  std::map<std::string, std::string> failed_folders_;  // key -> why
  std::map<std::string, int> dropped_folders_;         // key -> times dropped
  std::uint64_t folder_builds_ = 0;
};

}  // namespace leap::sandbox

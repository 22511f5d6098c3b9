#include "sandbox/compile_cache.hpp"

#include "common/enums/enum_names.hpp"
#include "sandbox/process.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace {
// Entry file: "LEAPCACHE1 ok|fail|timeout|refused <artifact bytes>\n" then the artifact then the
// log. A refused entry's "artifact" is "<category>\n<feedback>".
constexpr const char* k_magic = "LEAPCACHE1";

// The outcome an entry records, by name on disk: never rename a value.
enum class entry_state : std::uint8_t { ok, fail, timeout, refused };

constexpr std::string_view name_of(entry_state s) {
  switch (s) {
    case entry_state::ok:
      return "ok";
    case entry_state::fail:
      return "fail";
    case entry_state::timeout:
      return "timeout";
    case entry_state::refused:
      return "refused";
  }
  return {};
}

entry_state state_of(const build_output& out) {
  if (out.ok) {
    return entry_state::ok;
  }
  if (out.timed_out) {
    return entry_state::timeout;
  }
  return out.refusal_category ? entry_state::refused : entry_state::fail;
}
}  // namespace

result<std::unique_ptr<compile_cache>> compile_cache::open(const fs::path& dir,
                                                           std::uint64_t max_bytes) {
  std::unique_ptr<compile_cache> cache(new compile_cache(dir, max_bytes));
  if (max_bytes == 0) {
    return cache;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return error{"compile cache " + dir.string() + ": " + ec.message()};
  }
  std::vector<std::pair<fs::file_time_type, std::pair<std::string, std::uint64_t>>> found;
  for (const auto& sub : fs::directory_iterator(dir, ec)) {
    if (!sub.is_directory()) {
      continue;
    }
    for (const auto& f : fs::directory_iterator(sub.path(), ec)) {
      if (f.path().extension() != ".entry") {
        continue;
      }
      found.push_back({f.last_write_time(ec), {f.path().stem().string(), f.file_size(ec)}});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [time, info] : found) {
    cache->lru_.push_back(info.first);
    cache->index_[info.first] = {info.second, std::prev(cache->lru_.end())};
    cache->total_bytes_ += info.second;
  }
  std::lock_guard lock(cache->mutex_);
  cache->evict();
  return cache;
}

fs::path compile_cache::path_of(const std::string& key) const {
  return dir_ / key.substr(0, 2) / (key + ".entry");
}

std::optional<build_output> compile_cache::load(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::string magic, state_name;
  std::uint64_t artifact_bytes = 0;
  in >> magic >> state_name >> artifact_bytes;
  if (magic != k_magic || in.get() != '\n') {
    return std::nullopt;
  }
  const auto state = enum_names::parse<entry_state>(state_name, "cache entry state");
  if (!state) {
    return std::nullopt;  // not an entry this cache wrote: build again
  }
  build_output out;
  out.artifact.resize(artifact_bytes);
  in.read(out.artifact.data(), static_cast<std::streamsize>(artifact_bytes));
  if (static_cast<std::uint64_t>(in.gcount()) != artifact_bytes) {
    return std::nullopt;
  }
  switch (*state) {
    case entry_state::ok:
      out.ok = true;
      break;
    case entry_state::timeout:
      out.timed_out = true;
      break;
    case entry_state::fail:
      break;
    case entry_state::refused: {
      const auto newline = out.artifact.find('\n');
      if (newline == std::string::npos) {
        return std::nullopt;
      }
      auto category = parse_verdict_category(std::string_view(out.artifact).substr(0, newline));
      if (!category) {
        return std::nullopt;  // not an entry this cache wrote: build again
      }
      out.refusal_category = *category;
      out.refusal = out.artifact.substr(newline + 1);
      out.artifact.clear();
      break;
    }
  }
  std::ostringstream rest;
  rest << in.rdbuf();
  out.log = rest.str();
  return out;
}

void compile_cache::store(const std::string& key, const build_output& out) {
  const fs::path path = path_of(key);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  // Written aside and renamed, so a reader never sees half an entry.
  const fs::path tmp = path.string() + ".tmp" +
                       std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    const entry_state state = state_of(out);
    const bool refused = state == entry_state::refused;
    const std::string refusal_body =
        refused ? to_string(*out.refusal_category) + "\n" + out.refusal : std::string{};
    const std::string& body = refused ? refusal_body : out.artifact;
    f << k_magic << ' ' << name_of(state) << ' ' << body.size() << '\n';
    f.write(body.data(), static_cast<std::streamsize>(body.size()));
    f.write(out.log.data(), static_cast<std::streamsize>(out.log.size()));
    if (!f) {
      fs::remove(tmp, ec);
      return;  // a cache that cannot write is only slower
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return;
  }
  const std::uint64_t bytes = fs::file_size(path, ec);
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    total_bytes_ -= it->second.bytes;
    lru_.erase(it->second.position);
    index_.erase(it);
  }
  lru_.push_front(key);
  index_[key] = {bytes, lru_.begin()};
  total_bytes_ += bytes;
  evict();
}

void compile_cache::touch(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    return;
  }
  lru_.splice(lru_.begin(), lru_, it->second.position);
}

void compile_cache::evict() {
  while (total_bytes_ > max_bytes_ && !lru_.empty()) {
    const std::string victim = lru_.back();
    lru_.pop_back();
    auto it = index_.find(victim);
    if (it != index_.end()) {
      total_bytes_ -= it->second.bytes;
      index_.erase(it);
    }
    std::error_code ec;
    fs::remove(path_of(victim), ec);
  }
}

result<cache_lookup> compile_cache::get_or_build(const std::string& key,
                                                 const std::function<result<build_output>()>& build,
                                                 bool cache_failures) {
  std::shared_future<result<build_output>> waiting;
  std::promise<result<build_output>> promise;
  bool builder = false;
  {
    std::unique_lock lock(mutex_);
    if (max_bytes_ > 0 && index_.count(key) != 0) {
      touch(key);
      lock.unlock();
      if (auto cached = load(key)) {
        return cache_lookup{std::move(*cached), true, false, 0};
      }
      lock.lock();
      // Vanished or damaged on disk: forget it and build.
      if (auto it = index_.find(key); it != index_.end()) {
        total_bytes_ -= it->second.bytes;
        lru_.erase(it->second.position);
        index_.erase(it);
      }
    }
    if (auto it = in_flight_.find(key); it != in_flight_.end()) {
      waiting = it->second;
      ++waiting_;
    } else {
      builder = true;
      waiting = promise.get_future().share();
      in_flight_[key] = waiting;
      ++builds_;
    }
  }
  if (!builder) {
    auto out = waiting.get();
    {
      std::lock_guard lock(mutex_);
      --waiting_;
    }
    if (!out) {
      return out.err();
    }
    return cache_lookup{out.value(), false, true, 0};
  }
  const auto start = std::chrono::steady_clock::now();
  auto out = build();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // A build that ran out of time may succeed on a less loaded host: not remembered.
  if (out && max_bytes_ > 0 && !out->timed_out && (out->ok || cache_failures)) {
    store(key, out.value());
  }
  promise.set_value(out);
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
  }
  if (!out) {
    return out.err();
  }
  return cache_lookup{std::move(out.value()), false, false, ms};
}

namespace {

// Keeps the `keep` most recently used folders under `root` (by mtime, which a use refreshes),
// never `current`; asides (".tmp") older than a day are debris of a process that died building.
void trim_folders(const fs::path& root, const fs::path& current, std::size_t keep) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& f : fs::directory_iterator(root, ec)) {
    const auto time = f.last_write_time(ec);
    if (f.path().filename().string().find(".tmp") != std::string::npos) {
      if (!ec && now - time > std::chrono::hours(24)) {
        fs::remove_all(f.path(), ec);
      }
      continue;
    }
    if (f.path() != current) {
      found.emplace_back(time, f.path());
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = keep > 0 ? keep - 1 : 0; i < found.size(); ++i) {
    fs::remove_all(found[i].second, ec);
  }
}

}  // namespace

std::optional<folder_lookup> compile_cache::find_folder(const std::string& key) {
  if (max_bytes_ == 0) {
    return std::nullopt;
  }
  const fs::path final_path = dir_ / "folders" / key;
  std::lock_guard lock(mutex_);
  std::error_code ec;
  if (failed_folders_.contains(key) || folders_in_flight_.contains(key) ||
      !fs::is_directory(final_path, ec)) {
    return std::nullopt;
  }
  fs::last_write_time(final_path, fs::file_time_type::clock::now(), ec);
  folder_lookup out;
  out.ok = true;
  out.path = final_path;
  out.hit = true;
  return out;
}

result<folder_lookup> compile_cache::get_or_build_folder(
    const std::string& key, const std::function<result<build_output>(const fs::path& aside)>& build,
    std::size_t max_folders) {
  folder_lookup out;
  if (max_bytes_ == 0) {
    out.log = "the compile cache's disk is disabled";
    return out;
  }
  const fs::path root = dir_ / "folders";
  const fs::path final_path = root / key;
  std::promise<result<folder_lookup>> promise;
  std::shared_future<result<folder_lookup>> waiting;
  bool builder = false;
  {
    std::lock_guard lock(mutex_);
    if (auto it = failed_folders_.find(key); it != failed_folders_.end()) {
      out.log = it->second;
      return out;
    }
    if (auto it = folders_in_flight_.find(key); it != folders_in_flight_.end()) {
      waiting = it->second;
      ++waiting_;
    } else {
      std::error_code ec;
      if (fs::is_directory(final_path, ec)) {
        fs::last_write_time(final_path, fs::file_time_type::clock::now(), ec);
        out.ok = true;
        out.path = final_path;
        out.hit = true;
        return out;
      }
      builder = true;
      waiting = promise.get_future().share();
      folders_in_flight_[key] = waiting;
      ++folder_builds_;
    }
  }
  if (!builder) {
    auto shared = waiting.get();
    {
      std::lock_guard lock(mutex_);
      --waiting_;
    }
    if (shared) {
      shared->shared = true;
      shared->hit = false;
    }
    return shared;
  }
  auto made = [&]() -> result<folder_lookup> {
    std::error_code ec;
    fs::create_directories(root, ec);
    const fs::path aside =
        root / (key + ".tmp" + std::to_string(::getpid()) + "-" +
                std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())));
    fs::remove_all(aside, ec);
    if (!fs::create_directory(aside, ec) || ec) {
      return error{"compile cache: creating " + aside.string() + ": " + ec.message()};
    }
    const auto start = std::chrono::steady_clock::now();
    auto built = build(aside);
    folder_lookup r;
    r.build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!built || !built->ok) {
      fs::remove_all(aside, ec);
      if (!built) {
        return built.err();
      }
      r.log = built->log;
      return r;
    }
    r.log = built->log;
    fs::rename(aside, final_path, ec);
    if (ec) {
      // Another process renamed its own first (a folder is replaced only when empty): keep it.
      fs::remove_all(aside, ec);
      if (!fs::is_directory(final_path, ec)) {
        return error{"compile cache: moving " + aside.string() + " into place failed"};
      }
    }
    r.ok = true;
    r.path = final_path;
    trim_folders(root, final_path, max_folders);
    return r;
  };
  auto result_of = made();
  {
    std::lock_guard lock(mutex_);
    if (result_of && !result_of->ok) {
      failed_folders_[key] = result_of->log.empty() ? "its build failed" : result_of->log;
    }
    folders_in_flight_.erase(key);
  }
  promise.set_value(result_of);
  return result_of;
}

void compile_cache::drop(const std::string& key) {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  fs::remove(path_of(key), ec);
  if (auto it = index_.find(key); it != index_.end()) {
    total_bytes_ -= it->second.bytes;
    lru_.erase(it->second.position);
    index_.erase(it);
  }
}

void compile_cache::drop_folder(const std::string& key) {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  fs::remove_all(dir_ / "folders" / key, ec);
  if (++dropped_folders_[key] >= 2) {
    failed_folders_[key] = "dropped twice as damaged: not built again by this engine";
  }
}

std::uint64_t compile_cache::folder_builds() const {
  std::lock_guard lock(mutex_);
  return folder_builds_;
}

std::uint64_t compile_cache::bytes_on_disk() const {
  std::lock_guard lock(mutex_);
  return total_bytes_;
}

std::size_t compile_cache::entries() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

std::uint64_t compile_cache::builds() const {
  std::lock_guard lock(mutex_);
  return builds_;
}

std::size_t compile_cache::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

}  // namespace leap::sandbox

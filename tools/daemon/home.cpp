#include "tools/daemon/home.hpp"

#include "common/durable_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace leap::daemon {
namespace fs = std::filesystem;

result<fs::path> resolve_home(const std::string& flag) {
  if (!flag.empty()) {
    return fs::absolute(flag).lexically_normal();
  }
  if (const char* v = std::getenv("LEAP_HOME"); v && *v) {
    return fs::absolute(v).lexically_normal();
  }
  if (const char* v = std::getenv("XDG_STATE_HOME"); v && *v) {
    return fs::path(v) / "leap";
  }
  if (const char* v = std::getenv("HOME"); v && *v) {
    return fs::path(v) / ".local/state/leap";
  }
  return error{"no daemon home: pass --home DIR or set LEAP_HOME"};
}

result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{path.string() + ": cannot read: " + std::strerror(errno)};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string read_tail(const fs::path& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return {};
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(in.tellg());
  const std::size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string text(size - start, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (start > 0) {
    const auto nl = text.find('\n');
    text = nl == std::string::npos ? std::string{} : text.substr(nl + 1);
  }
  return text;
}

result<std::string> ensure_token(const fs::path& home) {
  const fs::path path = home / "token";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", st.st_mode & 0777);
      return error{path.string() + ": other users may read it (mode " + mode +
                   "); chmod 600 it, or remove it to get a new token"};
    }
    return read_token(home);
  }
  unsigned char bytes[32];
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    if (!random.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
      return error{"/dev/urandom: cannot read random bytes for the token"};
    }
  }
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  // Written whole and synced before it appears (a crash never leaves an empty token file), and
  // never over an existing one: of two daemons starting at once on one home, one creates it and
  // the other reads it.
  auto created = create_file_durably(path.string(), token + "\n", 0600);
  if (!created) {
    return created.err();
  }
  if (!*created) {
    return read_token(home);
  }
  return token;
}

result<std::string> read_token(const fs::path& home) {
  const fs::path path = home / "token";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return error{path.string() + ": no token; has `leap daemon --home " + home.string() +
                 "` ever run?"};
  }
  auto text = read_text(path);
  if (!text) {
    return text.err();
  }
  std::string token = *text;
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) {
    token.pop_back();
  }
  if (token.empty()) {
    return error{path.string() + ": empty token file"};
  }
  return token;
}

status save_record(const fs::path& home, const experiment_record& r) {
  const fs::path dir = experiment_dir(home, r.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return error{dir.string() + ": cannot create: " + ec.message()};
  }
  return write_file_durably(
      (dir / "state.json").string(),
      to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

loaded_records load_records(const fs::path& home) {
  loaded_records out;
  std::error_code ec;
  const fs::path dir = experiments_dir(home);
  if (!fs::is_directory(dir, ec)) {
    return out;
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path state = entry.path() / "state.json";
    if (!fs::exists(state, ec)) {
      continue;
    }
    auto text = read_text(state);
    if (!text) {
      out.problems.push_back(text.err().message);
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) {
      out.problems.push_back(state.string() + ": not valid JSON");
      continue;
    }
    auto record = record_from_json(j);
    if (!record) {
      out.problems.push_back(state.string() + ": " + record.err().message);
      continue;
    }
    if (record->id != entry.path().filename().string()) {
      out.problems.push_back(state.string() + ": holds id " + record->id);
      continue;
    }
    out.records.push_back(std::move(*record));
  }
  return out;
}

}  // namespace leap::daemon

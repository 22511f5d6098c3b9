#include "tools/daemon/settings.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace leap::daemon {
namespace {

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

std::string where(const std::string& source, const YAML::Node& n) {
  const int line = line_of(n);
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

template <class T>
bool read_scalar(const YAML::Node& value, T* out) {
  if (!value.IsScalar()) {
    return false;
  }
  // A quoted number is a string in YAML; reject it like the experiment config does.
  if (value.Tag() == "!") {
    return false;
  }
  try {
    *out = value.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

result<daemon_settings> parse_settings(const std::string& yaml_text,
                                       const std::string& source_name) {
  daemon_settings s;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const std::string line = e.mark.is_null() ? "" : ":" + std::to_string(e.mark.line + 1);
    return error{source_name + line + ": invalid YAML: " + e.msg};
  }
  if (root.IsNull()) {
    return s;
  }
  if (!root.IsMap()) {
    return error{where(source_name, root) + ": expected a mapping of settings"};
  }
  std::vector<std::string> problems;
  for (const auto& item : root) {
    const auto key = item.first.as<std::string>("");
    const auto& value = item.second;
    const std::string at = where(source_name, item.first) + ": " + key + ": ";
    if (key == "port") {
      if (!read_scalar(value, &s.port) || s.port < 0 || s.port > 65535) {
        problems.push_back(at + "expected an integer in [0, 65535]");
      }
    } else if (key == "max_concurrent") {
      if (!read_scalar(value, &s.max_concurrent) || s.max_concurrent < 1) {
        problems.push_back(at + "expected an integer >= 1");
      }
    } else if (key == "grace_period_s") {
      if (!read_scalar(value, &s.grace_period_s) || !(s.grace_period_s > 0)) {
        problems.push_back(at + "expected a number > 0");
      }
    } else if (key == "max_connections") {
      if (!read_scalar(value, &s.max_connections) || s.max_connections < 0) {
        problems.push_back(at + "expected an integer >= 0 (0: the API's worker count)");
      }
    } else {
      problems.push_back(at +
                         "unknown key (known: port, max_concurrent, grace_period_s, "
                         "max_connections)");
    }
  }
  if (problems.empty()) {
    return s;
  }
  std::string message;
  for (const auto& p : problems) {
    message += (message.empty() ? "" : "\n") + p;
  }
  return error{message};
}

result<daemon_settings> load_settings(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return daemon_settings{};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{path + ": cannot read"};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_settings(text.str(), path);
}

std::string describe(const daemon_settings& s) {
  std::ostringstream out;
  out << "port " << s.port << ", max_concurrent " << s.max_concurrent << ", grace_period_s "
      << s.grace_period_s << ", max_connections " << s.max_connections;
  return out.str();
}

}  // namespace leap::daemon

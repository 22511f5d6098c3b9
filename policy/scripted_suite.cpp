#include "policy/scripted_suite.hpp"

#include "common/enums/task_kind.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace leap::policy {
namespace {

namespace fs = std::filesystem;

result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{path.string() + ": cannot be read"};
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

result<scripted_task> read_task(const fs::path& dir) {
  const fs::path task_file = dir / "task.json";
  auto text = read_file(task_file);
  if (!text) {
    return text.err();
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    return error{task_file.string() + ": not valid JSON: " + e.what()};
  }
  const std::string where = task_file.string();
  if (!j.is_object()) {
    return error{where + ": the top level must be an object"};
  }
  const auto string_field = [&](const char* key) -> result<std::string> {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) {
      return error{where + ": '" + key + "' is required and must be a non-empty string"};
    }
    return it->get<std::string>();
  };
  scripted_task task;
  auto id = string_field("id");
  if (!id) {
    return id.err();
  }
  task.id = *id;
  auto prompt = string_field("prompt");
  if (!prompt) {
    return prompt.err();
  }
  task.prompt = *prompt;
  auto kind = string_field("kind");
  if (!kind) {
    return kind.err();
  }
  // Only the kinds whose answer is one source file are replayed; kernelbench and digits are not.
  const error unsupported{where + ": 'kind' must be cuda, cpp or python (got \"" + *kind + "\")"};
  const auto parsed = parse_task_kind(*kind);
  if (!parsed) {
    return unsupported;
  }
  std::string extension;
  switch (*parsed) {
    case task_kind::cuda:
      extension = ".cu";
      break;
    case task_kind::cpp:
      extension = ".cpp";
      break;
    case task_kind::python:
      extension = ".py";
      break;
    case task_kind::kernelbench:
    case task_kind::digits:
      return unsupported;
  }
  task.language = *kind;
  if (const auto it = j.find("difficulty"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int>() < 1 || it->get<int>() > 3) {
      return error{where + ": 'difficulty' must be 1, 2 or 3 (got " + it->dump() + ")"};
    }
    task.difficulty = it->get<int>();
  }
  const fs::path solution = dir / ("solution" + extension);
  std::error_code ec;
  if (!fs::is_regular_file(solution, ec)) {
    return error{dir.string() + ": no solution" + extension};
  }
  auto code = read_file(solution);
  if (!code) {
    return code.err();
  }
  task.solution = *code;
  const fs::path wrong_dir = dir / "wrong";
  if (fs::is_directory(wrong_dir, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(wrong_dir, ec)) {
      if (entry.is_regular_file(ec)) {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      auto wrong = read_file(file);
      if (!wrong) {
        return wrong.err();
      }
      task.wrong.push_back({file.stem().string(), *wrong});
    }
  }
  return task;
}

}  // namespace

result<std::vector<scripted_task>> load_scripted_suite(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return error{root + ": not a directory (expected a suite laid out as <kind>/<name>/task.json)"};
  }
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(
           root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename() == "task.json") {
      dirs.push_back(it->path().parent_path());
    }
  }
  if (ec) {
    return error{root + ": cannot be listed: " + ec.message()};
  }
  if (dirs.empty()) {
    return error{root + ": no task.json under it (expected <kind>/<name>/task.json)"};
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<scripted_task> tasks;
  tasks.reserve(dirs.size());
  for (const auto& dir : dirs) {
    auto task = read_task(dir);
    if (!task) {
      return task.err();
    }
    tasks.push_back(std::move(*task));
  }
  return tasks;
}

}  // namespace leap::policy

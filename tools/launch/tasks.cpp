#include "tools/launch/tasks.hpp"

#include "orchestrator/schedule.hpp"
#include "sandbox/kinds.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

namespace leap::launch {
namespace {

bool has_task_json_below(const std::filesystem::path& dir) {
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename() == "task.json") {
      return true;
    }
  }
  return false;
}

result<std::vector<sandbox::task>> filter_kinds(std::vector<sandbox::task> tasks,
                                                const std::vector<std::string>& kinds) {
  if (kinds.empty()) {
    return tasks;
  }
  std::set<task_kind> keep;
  for (const auto& k : kinds) {
    auto kind = parse_task_kind(k);
    if (!kind) {
      return kind.err().wrap("data.task_kinds");
    }
    keep.insert(*kind);
  }
  std::erase_if(tasks, [&](const sandbox::task& t) { return keep.count(t.kind) == 0; });
  return tasks;
}

std::vector<std::shared_ptr<const sandbox::task>> share(std::vector<sandbox::task> tasks) {
  std::vector<std::shared_ptr<const sandbox::task>> out;
  out.reserve(tasks.size());
  for (auto& t : tasks) {
    out.push_back(std::make_shared<const sandbox::task>(std::move(t)));
  }
  return out;
}

}  // namespace

result<std::vector<sandbox::task>> load_task_source(const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) {
    return error{path + ": no such file or folder"};
  }
  if (std::filesystem::is_directory(p, ec)) {
    if (has_task_json_below(p)) {
      return sandbox::load_suite(p);
    }
    return sandbox::load_kernelbench_dir(p);
  }
  if (p.extension() == ".jsonl") {
    return sandbox::load_jsonl(p);
  }
  return error{path + ": not a task suite folder or a .jsonl dataset"};
}

policy::scripted_task scripted_task_of(const sandbox::task& t) {
  policy::scripted_task s;
  s.id = t.id;
  s.prompt = t.prompt;
  s.language = std::string(sandbox::traits_of(t.kind).fence);
  s.solution = t.solution;
  for (const auto& w : t.wrong) {
    s.wrong.push_back({w.label, w.code});
  }
  s.difficulty = std::clamp(t.difficulty, 1, 3);
  return s;
}

result<std::vector<policy::scripted_task>> load_scripted_suite(const std::string& root) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    return error{root + ": not a directory (expected a suite laid out as <kind>/<name>/task.json)"};
  }
  auto tasks = sandbox::load_suite(root, sandbox::task_checks::format);
  if (!tasks) {
    return tasks.err();
  }
  if (tasks->empty()) {
    return error{root + ": no task.json under it (expected <kind>/<name>/task.json)"};
  }
  std::vector<policy::scripted_task> out;
  out.reserve(tasks->size());
  for (const auto& t : *tasks) {
    // The backend finds a task by its prompt in the conversation, and answers with its solution.
    if (t.prompt.empty()) {
      return error{t.origin + ": 'prompt' is required and must be a non-empty string"};
    }
    if (t.solution.empty()) {
      const auto dir = std::filesystem::path(t.origin).parent_path().string();
      return error{dir + ": no solution" + std::string(sandbox::traits_of(t.kind).extension)};
    }
    out.push_back(scripted_task_of(t));
  }
  return out;
}

result<run_tasks> load_run_tasks(const data_section& data, std::uint64_t seed) {
  if (data.train.empty()) {
    return error{"data.train: no task suite given (leap run needs tasks; leap simulate does not)"};
  }
  auto train = load_task_source(data.train);
  if (!train) {
    return train.err().wrap("data.train");
  }
  auto kept = filter_kinds(std::move(*train), data.task_kinds);
  if (!kept) {
    return kept.err();
  }
  if (kept->empty()) {
    return error{"data.train: " + data.train + " holds no task of the kinds in data.task_kinds"};
  }
  run_tasks out;
  if (!data.validation.empty()) {
    auto validation = load_task_source(data.validation);
    if (!validation) {
      return validation.err().wrap("data.validation");
    }
    auto kept_validation = filter_kinds(std::move(*validation), data.task_kinds);
    if (!kept_validation) {
      return kept_validation.err();
    }
    out.validation = share(std::move(*kept_validation));
    out.train = share(std::move(*kept));
    return out;
  }
  const auto split = split_tasks(seed, kept->size(), data.validation_fraction);
  for (auto i : split.train) {
    out.train.push_back(std::make_shared<const sandbox::task>((*kept)[i]));
  }
  for (auto i : split.validation) {
    out.validation.push_back(std::make_shared<const sandbox::task>((*kept)[i]));
  }
  return out;
}

}  // namespace leap::launch

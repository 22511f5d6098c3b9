#include "sandbox/task.hpp"

#include "sandbox/kinds.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace leap::sandbox {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{"cannot read " + path.string()};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

result<value_type> parse_type(const std::string& s) {
  if (s == "float") {
    return value_type::f32;
  }
  if (s == "double") {
    return value_type::f64;
  }
  if (s == "int") {
    return value_type::i32;
  }
  return error{"'type' must be float, double or int, not '" + s + "'"};
}

result<arg_role> parse_role(const std::string& s) {
  if (s == "input") {
    return arg_role::input;
  }
  if (s == "output") {
    return arg_role::output;
  }
  if (s == "inout") {
    return arg_role::inout;
  }
  if (s == "scalar") {
    return arg_role::scalar;
  }
  return error{"'role' must be input, output, inout or scalar, not '" + s + "'"};
}

// Reads the fields shared by task.json and a JSONL line. Unknown keys are ignored so that datasets
// may carry extra metadata.
result<task> task_from_json(const json& j, const std::string& context) {
  auto fail = [&](const std::string& what) { return error{context + ": " + what}; };
  if (!j.is_object()) {
    return fail("expected a JSON object");
  }
  task t;
  t.origin = context;
  try {
    if (!j.contains("id") || !j["id"].is_string()) {
      return fail("'id' (string) is required");
    }
    t.id = j["id"].get<std::string>();
    if (!j.contains("kind") || !j["kind"].is_string()) {
      return fail("'kind' (string) is required");
    }
    auto kind = parse_task_kind(j["kind"].get<std::string>());
    if (!kind) {
      return fail("'kind': " + kind.err().message);
    }
    t.kind = *kind;
    t.difficulty = j.value("difficulty", 1);
    t.category = j.value("category", "");
    t.prompt = j.value("prompt", "");
    if (j.contains("seed")) {
      t.seed = j["seed"].get<std::uint64_t>();
    }
    if (const auto own_kernel = j.value("own_kernel", std::string{}); !own_kernel.empty()) {
      auto policy = enum_names::parse<own_kernel_policy>(own_kernel, "own_kernel policy");
      if (!policy) {
        return fail("'own_kernel' must be \"require\" or \"off\", not '" + own_kernel + "'");
      }
      t.own_kernel = *policy;
    }
    if (traits_of(t.kind).needs == required_source::target) {
      if (!j.contains("target") || !j["target"].is_number_integer()) {
        return fail("'target' (integer) is required for a digits task");
      }
      t.target = j["target"].get<int>();
      if (t.target < 0) {
        return fail("'target' must be >= 0");
      }
      if (t.prompt.empty()) {
        t.prompt = "Write digits whose sum is " + std::to_string(t.target) + ".";
      }
    }
    if (j.contains("args")) {
      if (!j["args"].is_array()) {
        return fail("'args' must be an array");
      }
      std::size_t index = 0;
      for (const auto& a : j["args"]) {
        const std::string where = "'args[" + std::to_string(index++) + "]'";
        arg_spec arg;
        if (!a.contains("name") || !a["name"].is_string()) {
          return fail(where + ": 'name' is required");
        }
        arg.name = a["name"].get<std::string>();
        auto type = parse_type(a.value("type", "float"));
        if (!type) {
          return fail(where + ": " + type.err().message);
        }
        arg.type = *type;
        auto role = parse_role(a.value("role", ""));
        if (!role) {
          return fail(where + ": " + role.err().message);
        }
        arg.role = *role;
        if (arg.role == arg_role::scalar) {
          if (!a.contains("value") || !a["value"].is_number()) {
            return fail(where + ": a scalar needs a numeric 'value'");
          }
          arg.value = a["value"].get<double>();
        } else {
          if (!a.contains("count")) {
            return fail(where + ": a pointer arg needs 'count'");
          }
          arg.count = a["count"].is_number_integer()
                          ? std::to_string(a["count"].get<std::int64_t>())
                          : a["count"].get<std::string>();
          if (a.contains("range")) {
            const auto& r = a["range"];
            if (!r.is_array() || r.size() != 2 || !r[0].is_number() || !r[1].is_number()) {
              return fail(where + ": 'range' must be [low, high]");
            }
            arg.low = r[0].get<double>();
            arg.high = r[1].get<double>();
            if (arg.low > arg.high) {
              return fail(where + ": 'range' low is above high");
            }
          } else if (arg.type == value_type::i32) {
            arg.low = 0;
            arg.high = 100;
          }
        }
        t.args.push_back(std::move(arg));
      }
    }
    if (j.contains("tolerance")) {
      tolerance tol;
      tol.atol = j["tolerance"].value("atol", tol.atol);
      tol.rtol = j["tolerance"].value("rtol", tol.rtol);
      tol.max_relative_l2 = j["tolerance"].value("max_relative_l2", tol.max_relative_l2);
      t.tol = tol;
    }
    if (j.contains("forbidden")) {
      t.forbidden = j["forbidden"].get<std::vector<std::string>>();
    } else {
      t.forbidden = default_forbidden(t.kind);
    }
  } catch (const json::exception& e) {
    return fail(std::string("wrong type of a field: ") + e.what());
  }
  return t;
}

std::int64_t scalar_value(const task& t, const std::string& name, bool* found) {
  for (const auto& a : t.args) {
    if (a.role == arg_role::scalar && a.name == name) {
      *found = true;
      return static_cast<std::int64_t>(a.value);
    }
  }
  *found = false;
  return 0;
}

}  // namespace

const char* candidate_extension(task_kind kind) {
  // The table's views are of string literals: NUL-terminated.
  return traits_of(kind).extension.data();
}

std::vector<std::string> default_forbidden(task_kind kind) {
  const auto items = traits_of(kind).default_forbidden;
  return {items.begin(), items.end()};
}

result<std::int64_t> element_count(const task& t, const arg_spec& arg) {
  std::int64_t product = 1;
  std::stringstream ss(arg.count);
  std::string term;
  while (std::getline(ss, term, '*')) {
    term.erase(
        std::remove_if(term.begin(), term.end(), [](unsigned char c) { return std::isspace(c); }),
        term.end());
    if (term.empty()) {
      return error{t.id + ": arg '" + arg.name + "': empty term in count '" + arg.count + "'"};
    }
    std::int64_t v = 0;
    if (std::all_of(term.begin(), term.end(), [](unsigned char c) { return std::isdigit(c); })) {
      v = std::stoll(term);
    } else {
      bool found = false;
      v = scalar_value(t, term, &found);
      if (!found) {
        return error{t.id + ": arg '" + arg.name + "': count term '" + term +
                     "' is neither an integer nor a scalar arg"};
      }
    }
    product *= v;
  }
  if (product < 0) {
    return error{t.id + ": arg '" + arg.name + "': negative count"};
  }
  return product;
}

status validate_task(const task& t) {
  const std::string where = t.id.empty() ? t.origin : t.id;
  if (traits_of(t.kind).needs != required_source::tests && !t.hidden_tests.empty()) {
    return error{where + ": hidden_tests.py (or 'hidden_tests') belongs to tasks judged by tests"};
  }
  switch (traits_of(t.kind).needs) {
    case required_source::args_and_reference: {
      if (t.args.empty()) {
        return error{where + ": 'args' is required for a " + to_string(t.kind) + " task"};
      }
      if (t.reference.empty()) {
        return error{where + ": reference.cpp (or 'reference') is required"};
      }
      std::set<std::string> names;
      for (const auto& a : t.args) {
        if (!names.insert(a.name).second) {
          return error{where + ": arg name '" + a.name + "' appears twice"};
        }
        if (a.role != arg_role::scalar) {
          auto n = element_count(t, a);
          if (!n) {
            return n.err();
          }
        }
      }
      break;
    }
    case required_source::tests:
      if (t.tests.empty()) {
        return error{where + ": tests.py (or 'tests') is required"};
      }
      break;
    case required_source::problem:
      if (t.reference.empty()) {
        return error{where + ": the problem source is empty"};
      }
      break;
    case required_source::target:
      break;  // checked where task.json is read: a digits task cannot exist without one
  }
  return ok_status();
}

result<task> parse_task_json(const std::string& json_text, const std::string& context) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return error{context + ": invalid JSON: " + e.what()};
  }
  return task_from_json(j, context);
}

result<task> load_task_dir(const fs::path& dir, task_checks checks) {
  const fs::path task_json = dir / "task.json";
  auto text = read_text(task_json);
  if (!text) {
    return text.err();
  }
  auto t = parse_task_json(*text, task_json.string());
  if (!t) {
    return t.err();
  }
  auto optional_file = [&](const fs::path& p) -> std::string {
    auto content = read_text(p);
    return content ? *content : std::string{};
  };
  t->reference = optional_file(dir / "reference.cpp");
  t->tests = optional_file(dir / "tests.py");
  t->hidden_tests = optional_file(dir / "hidden_tests.py");
  t->solution = optional_file(dir / (std::string("solution") + candidate_extension(t->kind)));
  if (fs::is_directory(dir / "wrong")) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir / "wrong")) {
      if (e.is_regular_file()) {
        files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      t->wrong.push_back({f.stem().string(), optional_file(f)});
    }
  }
  if (checks == task_checks::full) {
    if (auto v = validate_task(*t); !v) {
      return error{dir.string() + ": " + v.err().message};
    }
  }
  return t;
}

result<std::vector<task>> load_suite(const fs::path& root, task_checks checks) {
  if (!fs::is_directory(root)) {
    return error{"suite directory " + root.string() + " does not exist"};
  }
  std::vector<task> tasks;
  for (const auto& kind_dir : fs::directory_iterator(root)) {
    if (!kind_dir.is_directory()) {
      continue;
    }
    for (const auto& task_dir : fs::directory_iterator(kind_dir.path())) {
      if (!fs::exists(task_dir.path() / "task.json")) {
        continue;
      }
      auto t = load_task_dir(task_dir.path(), checks);
      if (!t) {
        return t.err();
      }
      tasks.push_back(std::move(t.value()));
    }
  }
  std::sort(tasks.begin(), tasks.end(), [](const task& a, const task& b) { return a.id < b.id; });
  return tasks;
}

result<std::vector<task>> load_jsonl(const fs::path& file) {
  std::ifstream in(file);
  if (!in) {
    return error{"cannot read " + file.string()};
  }
  std::vector<task> tasks;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    const std::string context = file.string() + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      return error{context + ": invalid JSON: " + e.what()};
    }
    auto t = task_from_json(j, context);
    if (!t) {
      return t.err();
    }
    try {
      t->reference = j.value("reference", "");
      t->tests = j.value("tests", "");
      t->hidden_tests = j.value("hidden_tests", "");
      t->solution = j.value("solution", "");
      if (j.contains("wrong")) {
        for (const auto& w : j["wrong"]) {
          t->wrong.push_back({w.at("label").get<std::string>(), w.at("code").get<std::string>()});
        }
      }
    } catch (const json::exception& e) {
      return error{context +
                   ": 'reference', 'tests', 'hidden_tests', 'solution' must be strings and 'wrong' "
                   "a list of "
                   "{label, code}: " +
                   e.what()};
    }
    if (auto v = validate_task(*t); !v) {
      return error{context + ": " + v.err().message};
    }
    tasks.push_back(std::move(t.value()));
  }
  return tasks;
}

result<task> load_kernelbench_file(const fs::path& file, const std::string& level) {
  auto text = read_text(file);
  if (!text) {
    return text.err();
  }
  for (const char* needed : {"class Model", "def get_inputs", "def get_init_inputs"}) {
    if (text->find(needed) == std::string::npos) {
      return error{file.string() + ": not a KernelBench problem: no '" + needed + "'"};
    }
  }
  task t;
  t.kind = task_kind::kernelbench;
  t.id = "kernelbench/" + (level.empty() ? std::string{} : level + "/") + file.stem().string();
  t.category = "kernelbench";
  const auto digits = level.find_first_of("0123456789");
  t.difficulty = digits == std::string::npos ? 1 : std::max(1, std::atoi(level.c_str() + digits));
  t.prompt =
      "You are given the following PyTorch model:\n\n```python\n" + *text +
      "```\n\nWrite a class ModelNew with the same constructor arguments and forward() semantics "
      "that replaces the PyTorch operators with custom CUDA kernels for speed. Give the complete "
      "Python source in one ```python block.";
  t.reference = *text;
  t.origin = file.string();
  return t;
}

result<std::vector<task>> load_kernelbench_dir(const fs::path& dir) {
  if (!fs::is_directory(dir)) {
    return error{"KernelBench directory " + dir.string() + " does not exist"};
  }
  std::vector<std::pair<fs::path, std::string>> levels;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("level", 0) == 0) {
      levels.emplace_back(e.path(), e.path().filename().string());
    }
  }
  if (levels.empty()) {
    levels.emplace_back(dir, dir.filename().string());
  }
  std::vector<task> tasks;
  for (const auto& [path, level] : levels) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (!e.is_regular_file() || e.path().extension() != ".py") {
        continue;
      }
      auto t = load_kernelbench_file(e.path(), level);
      if (!t) {
        return t.err();
      }
      tasks.push_back(std::move(t.value()));
    }
  }
  if (tasks.empty()) {
    return error{dir.string() + ": no KernelBench problem files (*.py) found"};
  }
  std::sort(tasks.begin(), tasks.end(), [](const task& a, const task& b) { return a.id < b.id; });
  return tasks;
}

result<task> resolve_task(const std::string& spec, const fs::path& suite_root) {
  std::string path_part = spec;
  std::string id_in_file;
  if (const auto hash = spec.find('#'); hash != std::string::npos) {
    path_part = spec.substr(0, hash);
    id_in_file = spec.substr(hash + 1);
  }
  const fs::path p(path_part);
  if (fs::is_directory(p) && fs::exists(p / "task.json")) {
    return load_task_dir(p);
  }
  if (fs::is_regular_file(p)) {
    if (p.extension() == ".jsonl") {
      auto tasks = load_jsonl(p);
      if (!tasks) {
        return tasks.err();
      }
      for (auto& t : *tasks) {
        if (id_in_file.empty() || t.id == id_in_file) {
          return std::move(t);
        }
      }
      return error{p.string() + ": no task" +
                   (id_in_file.empty() ? std::string{} : " with id '" + id_in_file + "'")};
    }
    if (p.extension() == ".py") {
      return load_kernelbench_file(p, p.parent_path().filename().string());
    }
    if (p.filename() == "task.json") {
      return load_task_dir(p.parent_path());
    }
    return error{p.string() +
                 ": not a task (expected a task directory, task.json, .jsonl or KernelBench .py)"};
  }
  const fs::path by_id = suite_root / spec;
  if (fs::exists(by_id / "task.json")) {
    return load_task_dir(by_id);
  }
  return error{"no task '" + spec + "': not a file or directory, and no " + by_id.string() +
               "/task.json"};
}

}  // namespace leap::sandbox

#include "sandbox/engine.hpp"

#include "sandbox/digits.hpp"
#include "sandbox/extract.hpp"
#include "sandbox/forbidden.hpp"
#include "sandbox/hash.hpp"

#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>

#ifndef LEAP_NVCC_DEFAULT
#define LEAP_NVCC_DEFAULT "nvcc"
#endif

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t k_max_artifact_bytes = 256ULL << 20;
constexpr std::size_t k_max_result_json_bytes = 1 << 20;

std::string base_path(const std::string& extra_dir) {
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  return extra_dir.empty() ? path : extra_dir + ":" + path;
}

std::string dir_of(const std::string& program) {
  const auto slash = program.rfind('/');
  return slash == std::string::npos ? std::string{} : program.substr(0, slash);
}

std::string random_nonce() {
  std::random_device rd;
  std::ostringstream ss;
  for (int i = 0; i < 4; ++i) ss << std::hex << rd();
  return ss.str();
}

timing_stats stats_of(std::vector<double> ms) {
  timing_stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.reps = static_cast<int>(ms.size());
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  return s;
}

// Machine code for the one architecture only. -arch=sm_X would also embed PTX of compute_X for a
// later JIT, which nothing here uses (a run is on the machine the code was built for; an sm_90a
// PTX cannot be JIT-compiled for another GPU anyway) and which costs nvcc a noticeable part of a
// cold compile.
std::string gencode_flag(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return "-arch=" + arch;
  return "-gencode=arch=compute_" + arch.substr(3) + ",code=" + arch;
}

verdict make_verdict(verdict_category c, std::string feedback) {
  verdict v;
  v.category = c;
  v.passed = c == verdict_category::pass;
  v.feedback = std::move(feedback);
  return v;
}

// A word for /bin/sh: single-quoted.
std::string shell_word(const std::string& w) {
  std::string out = "'";
  for (char c : w) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + shell_word(a);
  return line;
}

// Whether a compiler of the build said it ran out of memory (RLIMIT_DATA). Lines located in the
// candidate's file and excerpts (indented) are skipped: they can hold any text the candidate wrote.
bool out_of_memory(const std::string& log, const std::string& file) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == ' ' || line[0] == '\t' || line.rfind(file, 0) == 0) continue;
    if (line.find("out of memory") != std::string::npos || line.find("memory exhausted") != std::string::npos ||
        line.find("std::bad_alloc") != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::string compile_log(const run_result& r) {
  std::string log = r.stderr_text;
  if (!r.stdout_text.empty()) log += (log.empty() ? "" : "\n") + r.stdout_text;
  return log;
}

}  // namespace

std::string default_nvcc() { return LEAP_NVCC_DEFAULT; }

std::vector<std::string> split_flags(const std::string& flags) {
  std::istringstream ss(flags);
  std::vector<std::string> out;
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

result<std::unique_ptr<engine>> engine::create(engine_config config) {
  if (config.cache_dir.empty()) {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
      config.cache_dir = fs::path(xdg) / "leap" / "compile";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
      config.cache_dir = fs::path(home) / ".cache" / "leap" / "compile";
    } else {
      config.cache_dir = config.scratch_root / "compile-cache";
    }
  }
  if (config.trials < 1) return error{"engine_config.trials must be at least 1"};
  if (config.timing_reps < 0) return error{"engine_config.timing_reps must not be negative"};
  auto cache = compile_cache::open(config.cache_dir, config.cache_max_bytes);
  if (!cache) return cache.err();
  std::unique_ptr<engine> e(new engine(std::move(config)));
  e->cache_ = std::move(cache.value());
  return e;
}

result<build_output> engine::build_in_sandbox(const std::vector<std::pair<std::string, std::string>>& files,
                                              const std::vector<std::string>& argv, const std::string& artifact) {
  auto dir = scratch_dir::create(config_.scratch_root, "build-");
  if (!dir) return dir.err();
  for (const auto& [name, content] : files) {
    if (auto s = write_file(dir->path() / name, content); !s) return s.err();
  }
  run_request request;
  request.argv = argv;
  request.working_dir = dir->path();
  // LC_ALL=C: plain ASCII quotes in diagnostics, the same text on every host.
  request.env = {{"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}, {"LANG", "C"}};
  request.limits = config_.compile_limits;
  auto r = run_isolated(request);
  if (!r) return r.err().wrap("running " + argv.front());
  build_output out;
  out.log = compile_log(*r);
  if (r->timed_out || r->signal == SIGXCPU) {
    out.timed_out = true;
    return out;
  }
  if (r->exited && r->exit_code == 0) {
    auto bytes = read_untrusted_file(dir->path() / artifact, k_max_artifact_bytes);
    if (!bytes) {
      out.log += "\n" + bytes.err().message;
      return out;
    }
    out.ok = true;
    out.artifact = std::move(bytes.value());
  } else if (!r->exited) {
    out.log += "\nthe compiler was killed by " + signal_name(r->signal);
  }
  return out;
}

result<std::string> engine::compiler_identity(task_kind kind) {
  // One probe at a time: the first caller runs it, the others find its answer.
  std::lock_guard probe_lock(identity_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = compiler_ids_.find(kind); it != compiler_ids_.end()) return it->second;
  }
  std::vector<std::vector<std::string>> commands;
  switch (kind) {
    case task_kind::cpp: commands = {{config_.cxx, "--version"}}; break;
    case task_kind::cuda: commands = {{config_.nvcc, "--version"}, {config_.cxx, "--version"}}; break;
    case task_kind::python:
    case task_kind::kernelbench: commands = {{config_.python, "--version"}}; break;
    case task_kind::digits: break;
  }
  std::string identity;
  for (const auto& argv : commands) {
    auto dir = scratch_dir::create(config_.scratch_root, "probe-");
    if (!dir) return dir.err();
    run_request request;
    request.argv = argv;
    request.working_dir = dir->path();
    request.env = {{"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}};
    request.limits = config_.compile_limits;
    auto r = run_isolated(request);
    if (!r) return r.err().wrap("finding the compiler for " + std::string(to_string(kind)) + " tasks");
    if (!r->exited || r->exit_code != 0) {
      const std::string how = r->timed_out ? "timed out" : r->exited ? "exit code " + std::to_string(r->exit_code)
                                                                     : "killed by " + signal_name(r->signal);
      return error{"'" + argv.front() + " --version' failed (" + how + "): " + r->stderr_text.substr(0, 300)};
    }
    identity += r->stdout_text + r->stderr_text;
  }
  std::lock_guard lock(mutex_);
  compiler_ids_[kind] = identity;
  return identity;
}

result<std::vector<fs::path>> engine::system_include_dirs(task_kind kind) {
  std::lock_guard probe_lock(identity_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = include_dirs_.find(kind); it != include_dirs_.end()) return it->second;
  }
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) return dir.err();
  run_request request;
  request.argv = {config_.cxx};
  for (auto& f : split_flags(config_.cxx_flags)) request.argv.push_back(f);
  for (const char* a : {"-E", "-v", "-x", "c++", "/dev/null", "-o", "/dev/null"}) request.argv.emplace_back(a);
  request.working_dir = dir->path();
  request.env = {{"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}};
  request.limits = config_.compile_limits;
  auto r = run_isolated(request);
  if (!r) return r.err().wrap("finding the system header folders of " + config_.cxx);
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    auto real = fs::canonical(p, ec);
    if (!ec && fs::is_directory(real, ec) && real != real.root_path() &&
        std::find(dirs.begin(), dirs.end(), real) == dirs.end()) {
      dirs.push_back(real);
    }
  };
  bool in_list = false;
  std::istringstream lines(r->stderr_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#include <...> search starts here:", 0) == 0 || line.rfind("#include \"...\" search starts here:", 0) == 0) {
      in_list = true;
    } else if (line.rfind("End of search list.", 0) == 0) {
      in_list = false;
    } else if (in_list && !line.empty() && line[0] == ' ') {
      add(line.substr(1));
    }
  }
  if (dirs.empty()) {
    return error{"'" + config_.cxx + " -E -v' listed no system header folders: " + r->stderr_text.substr(0, 300)};
  }
  if (kind == task_kind::cuda) {
    // The toolkit's headers: <toolkit>/include and <toolkit>/targets/<arch>/include (cccl below them).
    const fs::path toolkit = fs::path(config_.nvcc).parent_path().parent_path();
    if (config_.nvcc.find('/') != std::string::npos) {
      add(toolkit / "include");
      std::error_code ec;
      for (const auto& target : fs::directory_iterator(toolkit / "targets", ec)) add(target.path() / "include");
    }
  }
  std::lock_guard lock(mutex_);
  include_dirs_[kind] = dirs;
  return dirs;
}

result<build_output> engine::build_candidate(const task& t, const std::string& source, const std::string& object,
                                             const std::vector<fs::path>& system_dirs) {
  const bool cuda = t.kind == task_kind::cuda;
  const std::string stem = "solution";
  const std::string file = stem + (cuda ? ".cu" : ".cpp");
  const bool dump_names = !cuda && !t.forbidden.empty();
  std::vector<std::string> flags;
  for (auto& f : split_flags(cuda ? config_.nvcc_flags : config_.cxx_flags)) flags.push_back(f);
  if (cuda) {
    flags.push_back(gencode_flag(config_.cuda_arch));
  } else {
    flags.push_back("-pthread");
  }
  const std::string compiler = cuda ? config_.nvcc : config_.cxx;
  auto with = [&](std::initializer_list<std::string> extra) {
    std::vector<std::string> argv{compiler};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return shell_line(argv);
  };
  // Exit codes: 10 preprocessing, 11 compiling, 13 linking.
  std::string script;
  if (config_.compile_memory_bytes > 0) {
    script += "ulimit -d " + std::to_string(config_.compile_memory_bytes / 1024) + " 2>/dev/null\n";
  }
  if (cuda) {
    // --keep leaves the device and host preprocessed files (.cpp1.ii, .cpp4.ii) whose line markers
    // say what was included; nvcc writes them anyway.
    script += with({"-c", file, "-o", stem + ".o", "--keep", "-Xcompiler",
                    "-Xassembler,--MD,-Xassembler," + stem + ".asd"}) + " || exit 11\n";
  } else {
    // One compiler run when it succeeds (-MD lists what the preprocessor opened). g++ writes no
    // dependency file for a failed compile, so then a preprocessing run alone lists them (its
    // messages repeat the compile's and are dropped).
    std::string line = with({"-c", file, "-o", stem + ".o", "-MD", "-MF", stem + ".d", "-Wa,--MD," + stem + ".asd"});
    if (dump_names) line += " " + shell_word("-fdump-tree-original=" + stem + ".tree");
    // Preprocessing real code takes a few MiB: a quarter of the limit bounds an endless include
    // sooner the second time.
    const std::string preprocess_limit =
        config_.compile_memory_bytes > 0 ? "ulimit -d " + std::to_string(config_.compile_memory_bytes / 4096) + " 2>/dev/null; " : "";
    script += line + " || { (" + preprocess_limit + "exec " +
              with({"-E", "-MD", "-MF", stem + ".d", "-o", "/dev/null", file}) + ") 2>/dev/null || exit 10; exit 11; }\n";
  }
  script += with({"harness.o", stem + ".o", "-o", "cand"}) + " || exit 13\n";

  auto dir = scratch_dir::create(config_.scratch_root, "build-");
  if (!dir) return dir.err();
  for (const auto& [name, content] : std::vector<std::pair<std::string, const std::string*>>{
           {file, &source}, {"harness.o", &object}, {"build.sh", &script}}) {
    if (auto s = write_file(dir->path() / name, *content); !s) return s.err();
  }
  run_request request;
  request.argv = {"/bin/sh", "build.sh"};
  request.working_dir = dir->path();
  request.env = {{"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}, {"LANG", "C"}};
  request.limits = config_.compile_limits;
  auto r = run_isolated(request);
  if (!r) return r.err().wrap("running the build of " + file);
  build_output out;
  out.log = compile_log(*r);
  if (r->timed_out || r->signal == SIGXCPU) {
    out.timed_out = true;
    return out;
  }
  const int step = r->exited ? r->exit_code : -1;
  auto refuse = [&](const std::string& category, std::string text) {
    out.ok = false;
    out.refusal_category = category;
    out.refusal = std::move(text);
    return out;
  };
  auto read = [&](const std::string& name, std::size_t cap) -> std::optional<std::string> {
    auto bytes = read_untrusted_file(dir->path() / name, cap);
    if (!bytes) return std::nullopt;
    return std::move(bytes.value());
  };

  // 1. What the preprocessor opened, decided before any compiler message is looked at.
  include_policy policy{file, system_dirs, forbidden_libraries(t.forbidden)};
  bool saw_includes = false;
  if (cuda) {
    for (const char* pass : {".cpp1.ii", ".cpp4.ii"}) {
      auto text = read(stem + pass, k_max_artifact_bytes);
      if (!text) continue;
      saw_includes = true;
      if (auto hit = check_included_files(parse_line_markers(*text), policy)) return refuse("forbidden", hit->reason);
    }
  } else if (auto deps = read(stem + ".d", 16 << 20)) {
    saw_includes = true;
    if (auto hit = check_included_files(parse_make_deps(*deps), policy)) return refuse("forbidden", hit->reason);
  }
  if (step == 10 || (cuda && step == 11 && !saw_includes) || (!r->exited && !saw_includes)) {
    if (out_of_memory(out.log, file) || !r->exited) {
      // Preprocessing real code takes a few MiB: this is an include of a device or an endless file,
      // or a macro bomb. Forbidden rather than a compile error, without quoting anything.
      return refuse("forbidden", "Compilation was stopped: preprocessing " + file + " ran out of memory (limit " +
                                     std::to_string(config_.compile_memory_bytes >> 20) +
                                     " MiB). Include only system headers; a file that never ends (a device) is not "
                                     "one.");
    }
    if (!saw_includes) {
      // Nothing says which files were read: keep only the lines located in the candidate's file.
      std::istringstream lines(out.log);
      std::string kept;
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind(file + ":", 0) == 0 || line.rfind(file + "(", 0) == 0) kept += line + "\n";
      }
      out.log = kept;
    }
    return out;  // the candidate's own preprocessing errors
  }
  // 2. Files the assembler read (.incbin, .include).
  if (auto asd = read(stem + ".asd", 1 << 20)) {
    if (auto hit = check_assembler_files(parse_make_deps(*asd), stem)) return refuse("forbidden", hit->reason);
  }
  if (step == 11 || !r->exited) {
    if (out_of_memory(out.log, file) || !r->exited) {
      return refuse("compile", "Compilation was stopped: compiling " + file + " ran out of memory (limit " +
                                   std::to_string(config_.compile_memory_bytes >> 20) +
                                   " MiB; runaway templates or constexpr evaluation?).");
    }
    return out;
  }
  // 3. Forbidden names as the compiler resolved them.
  if (dump_names) {
    auto dump = read(stem + ".tree", 256ULL << 20);
    if (!dump) return refuse("compile", "Compilation failed: the program is too large to check.");
    if (auto hit = find_forbidden_in_dump(*dump, t.forbidden)) return refuse("forbidden", hit->reason);
  }
  // 4. The object's symbols.
  auto candidate_object = read(stem + ".o", k_max_artifact_bytes);
  if (!candidate_object) return refuse("compile", "Compilation failed: the compiler wrote no object file.");
  auto candidate_symbols = parse_elf_symbols(*candidate_object);
  if (!candidate_symbols) {
    return refuse("compile", "Compilation failed: the object file cannot be read (" + candidate_symbols.err().message + ").");
  }
  auto harness_symbols = parse_elf_symbols(object);
  if (!harness_symbols) return harness_symbols.err().wrap("the harness object of " + t.id);
  if (auto hit = check_object_symbols(*candidate_symbols, *harness_symbols, t.forbidden, file)) {
    return refuse("forbidden", hit->reason);
  }
  if (step != 0) return out;  // link errors
  auto bytes = read_untrusted_file(dir->path() / "cand", k_max_artifact_bytes);
  if (!bytes) {
    out.log += "\n" + bytes.err().message;
    return out;
  }
  out.ok = true;
  out.artifact = std::move(bytes.value());
  return out;
}

result<std::string> engine::harness_object(const task& t) {
  const bool cuda = t.kind == task_kind::cuda;
  auto identity = compiler_identity(t.kind);
  if (!identity) return identity.err();
  const std::string source = harness_source(t, cuda ? harness_flavor::cuda_candidate : harness_flavor::host_candidate);
  // The CUDA harness is host code only: g++ against the toolkit's headers builds it several times
  // faster than nvcc, and nvcc links it with the candidate (same host compiler, same ABI).
  const fs::path cuda_include = fs::path(config_.nvcc).parent_path().parent_path() / "include";
  const bool host_compiled = !cuda || (config_.nvcc.find('/') != std::string::npos && fs::exists(cuda_include / "cuda_runtime.h"));
  const std::string file = cuda && !host_compiled ? "harness.cu" : "harness.cpp";
  std::vector<std::string> argv;
  if (host_compiled) {
    argv = {config_.cxx};
    for (auto& f : split_flags(config_.cxx_flags)) argv.push_back(f);
    if (cuda) argv.push_back("-I" + cuda_include.string());
  } else {
    argv = {config_.nvcc};
    for (auto& f : split_flags(config_.nvcc_flags)) argv.push_back(f);
    argv.push_back(gencode_flag(config_.cuda_arch));
  }
  for (const char* a : {"-c", "", "-o", "harness.o"}) argv.emplace_back(*a ? a : file.c_str());
  std::string key_material = "harness-object\n" + *identity + "\n";
  for (const auto& a : argv) key_material += a + "\n";
  key_material += source;
  auto lookup = cache_->get_or_build(sha256_hex(key_material),
                                     [&] { return build_in_sandbox({{file, source}}, argv, "harness.o"); });
  if (!lookup) return lookup.err();
  if (!lookup->output.ok) {
    if (lookup->output.timed_out) return error{t.id + ": building the harness timed out (is the host overloaded?)"};
    return error{t.id + ": the generated harness does not compile (check the task's args):\n" +
                 lookup->output.log.substr(0, 2000)};
  }
  return lookup->output.artifact;
}

result<engine::reference_data> engine::reference_outputs(const task& t) {
  auto identity = compiler_identity(task_kind::cpp);
  if (!identity) return identity.err();
  const std::string harness = harness_source(t, harness_flavor::host_reference);
  std::vector<std::string> argv{config_.cxx};
  for (auto& f : split_flags(config_.cxx_flags)) argv.push_back(f);
  for (const char* a : {"-pthread", "harness.cpp", "reference.cpp", "-o", "ref"}) argv.emplace_back(a);
  std::string key_material = "reference\n" + *identity + "\n";
  for (const auto& a : argv) key_material += a + "\n";
  key_material += harness + "\n--reference--\n" + t.reference;
  const std::string build_key = sha256_hex(key_material);
  const std::string run_key = build_key + "/" + std::to_string(t.seed) + "/" + std::to_string(config_.trials) + "/" +
                              std::to_string(config_.timing_reps);

  auto compute = [&]() -> result<reference_data> {
    auto lookup = cache_->get_or_build(build_key, [&] {
      return build_in_sandbox({{"harness.cpp", harness}, {"reference.cpp", t.reference}}, argv, "ref");
    });
    if (!lookup) return lookup.err();
    if (!lookup->output.ok) {
      if (lookup->output.timed_out) return error{t.id + ": building the reference timed out (is the host overloaded?)"};
      return error{t.id + ": the task's reference does not compile:\n" + lookup->output.log.substr(0, 2000)};
    }
    auto dir = scratch_dir::create(config_.scratch_root, "ref-");
    if (!dir) return dir.err();
    if (auto s = write_file(dir->path() / "ref", lookup->output.artifact); !s) return s.err();
    ::chmod((dir->path() / "ref").c_str(), 0755);
    run_request request;
    request.argv = {"./ref", std::to_string(t.seed), std::to_string(config_.trials), "expected.bin",
                    std::to_string(config_.timing_reps)};
    request.working_dir = dir->path();
    request.env = {{"PATH", base_path("")}, {"LANG", "C.UTF-8"}};
    request.limits = config_.run_limits;
    request.limits.wall *= 6;
    request.limits.cpu_seconds *= 6;
    auto r = run_isolated(request);
    if (!r) return r.err().wrap(t.id + ": running the reference");
    if (!r->exited || r->exit_code != 0) {
      return error{t.id + ": the task's reference failed (" +
                   (r->timed_out ? std::string("timed out")
                    : r->exited  ? "exit code " + std::to_string(r->exit_code)
                                 : signal_name(r->signal)) +
                   "): " + r->stderr_text.substr(0, 1000)};
    }
    auto bytes = read_untrusted_file(dir->path() / "expected.bin", k_max_artifact_bytes);
    if (!bytes) return bytes.err().wrap(t.id + ": reference output");
    auto dump = parse_dump(*bytes, t);
    if (!dump) return dump.err().wrap(t.id + ": reference output");
    reference_data data;
    if (!dump->rep_ms.empty()) data.time = stats_of(dump->rep_ms);
    data.expected = std::make_shared<harness_dump>(std::move(dump.value()));
    return data;
  };

  // Once per task: the first caller computes, concurrent callers wait for its result.
  std::promise<result<reference_data>> promise;
  std::shared_future<result<reference_data>> future;
  bool mine = false;
  {
    std::lock_guard lock(mutex_);
    if (auto it = references_.find(run_key); it != references_.end()) {
      future = it->second;
    } else {
      future = promise.get_future().share();
      references_[run_key] = future;
      mine = true;
    }
  }
  if (!mine) return future.get();
  auto computed = compute();
  if (!computed) {
    // Not remembered: the next candidate retries (the failure may be the host's, not the task's).
    std::lock_guard lock(mutex_);
    references_.erase(run_key);
  }
  promise.set_value(computed);
  return computed;
}

result<prepared_candidate> engine::compile(const task& t, std::string_view answer, bool with_reference) {
  prepared_candidate p;
  if (t.kind == task_kind::digits) {
    // Judged on the text itself: nothing to compile or run.
    p.code = std::string(answer);
    p.final_verdict = judge_digit_sum(t.target, answer);
    return p;
  }
  auto extracted = extract_code(answer, t.kind);
  if (!extracted) {
    p.final_verdict = make_verdict(verdict_category::format, extracted.err().message);
    return p;
  }
  p.code = extracted->code;
  if (auto hit = find_forbidden(p.code, t.kind, t.forbidden)) {
    p.final_verdict = make_verdict(verdict_category::forbidden, hit->reason);
    return p;
  }
  if (t.kind == task_kind::python || t.kind == task_kind::kernelbench) return p;

  const bool cuda = t.kind == task_kind::cuda;
  auto object = harness_object(t);
  if (!object) return object.err();
  auto identity = compiler_identity(t.kind);
  if (!identity) return identity.err();
  auto system_dirs = system_include_dirs(t.kind);
  if (!system_dirs) return system_dirs.err();
  const std::string file = cuda ? "solution.cu" : "solution.cpp";
  // The code exactly as the model wrote it, so compiler line numbers and excerpts are its own.
  const std::string& source = p.code;
  // Everything the outcome depends on: the checks' inputs (forbidden list, header folders, memory
  // limit) as much as the compiler's.
  std::string key_material = "candidate-v2\n" + *identity + "\n" + (cuda ? config_.nvcc + "\n" + config_.nvcc_flags + "\n" + config_.cuda_arch
                                                                          : config_.cxx + "\n" + config_.cxx_flags) + "\n";
  key_material += std::to_string(config_.compile_memory_bytes) + "\n";
  for (const auto& item : t.forbidden) key_material += "forbid " + item + "\n";
  for (const auto& d : *system_dirs) key_material += "sys " + d.string() + "\n";
  key_material += sha256_hex(*object) + "\n" + source;
  auto lookup = cache_->get_or_build(sha256_hex(key_material),
                                     [&] { return build_candidate(t, source, *object, *system_dirs); });
  if (!lookup) return lookup.err();
  p.compile_ms = lookup->build_ms;
  p.cache_hit = lookup->hit || lookup->shared;
  if (!lookup->output.ok && !lookup->output.refusal_category.empty()) {
    verdict v = make_verdict(lookup->output.refusal_category == "forbidden" ? verdict_category::forbidden
                                                                           : verdict_category::compile,
                             trim_to_budget(lookup->output.refusal, config_.feedback.char_budget));
    v.compile_ms = p.compile_ms;
    v.cache_hit = p.cache_hit;
    p.final_verdict = std::move(v);
    return p;
  }
  if (!lookup->output.ok) {
    const double limit = std::chrono::duration<double>(config_.compile_limits.wall).count();
    std::string text = lookup->output.timed_out
                           ? "Compilation did not finish within " + std::to_string(static_cast<int>(limit)) +
                                 " s and was stopped (runaway templates or constexpr evaluation?)."
                           : compile_feedback(lookup->output.log, file, entry_signature(t, "solve"), config_.feedback);
    verdict v = make_verdict(verdict_category::compile, std::move(text));
    v.compile_ms = p.compile_ms;
    v.cache_hit = p.cache_hit;
    v.diagnostics = lookup->output.log.substr(0, 4000);
    p.final_verdict = std::move(v);
    return p;
  }
  p.binary = std::move(lookup->output.artifact);
  if (!with_reference) return p;
  auto reference = reference_outputs(t);
  if (!reference) return reference.err();
  p.expected = reference->expected;
  p.reference_time = reference->time;
  return p;
}

std::vector<std::pair<std::string, std::string>> engine::run_env(int gpu) const {
  std::vector<std::pair<std::string, std::string>> env{
      {"PATH", base_path("")}, {"LANG", "C.UTF-8"}, {"OMP_NUM_THREADS", "1"}, {"PYTHONHASHSEED", "0"}};
  if (gpu >= 0) env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu));
  return env;
}

result<verdict> engine::run_native(const task& t, const prepared_candidate& p, int gpu) {
  const bool cuda = t.kind == task_kind::cuda;
  auto dir = scratch_dir::create(config_.scratch_root, "run-");
  if (!dir) return dir.err();
  if (auto s = write_file(dir->path() / "cand", p.binary); !s) return s.err();
  ::chmod((dir->path() / "cand").c_str(), 0755);
  run_request request;
  request.argv = {"./cand", std::to_string(t.seed), std::to_string(config_.trials), "out.bin",
                  std::to_string(config_.timing_reps)};
  request.working_dir = dir->path();
  request.env = run_env(cuda ? gpu : -1);
  request.limits = cuda ? config_.cuda_run_limits : config_.run_limits;
  auto r = run_isolated(request);
  if (!r) return r.err();

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  if (r->timed_out) {
    return finish(verdict_category::timeout,
                  timeout_feedback(std::chrono::duration<double>(request.limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(request.limits.cpu_seconds, true));
  }
  if (auto he = parse_harness_error(r->stderr_text)) {
    if (he->kind == "cuda_init") {
      return error{"no usable GPU for " + t.id + " (" + he->name + ": " + he->text + ")"};
    }
    return finish(verdict_category::runtime, harness_error_feedback(*he, r->stderr_text));
  }
  if (!r->exited) return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  if (r->exit_code != 0) return finish(verdict_category::runtime, exit_feedback(r->exit_code, r->stderr_text));

  std::size_t bound = 1 << 20;
  for (const auto& trial : p.expected->trials) {
    for (const auto& out : trial.outputs) bound += out.size() * 8 + 64;
    bound += 64 * t.args.size();
  }
  auto bytes = read_untrusted_file(dir->path() / "out.bin", bound);
  harness_dump got;
  if (bytes) {
    auto dump = parse_dump(*bytes, t);
    if (dump) got = std::move(dump.value());
  }
  if (!bytes || got.trials.size() != p.expected->trials.size()) {
    return finish(verdict_category::runtime,
                  "Runtime error: the program exited (code 0) before the harness finished; do not call exit() "
                  "or close standard streams in solve().");
  }
  if (auto m = compare_dumps(t, *p.expected, got)) return finish(verdict_category::wrong_answer, mismatch_feedback(*m));
  if (!got.rep_ms.empty()) {
    v.candidate_time = stats_of(got.rep_ms);
    v.reference_time = p.reference_time;
    if (p.reference_time && v.candidate_time->median_ms > 0) {
      v.speedup = p.reference_time->median_ms / v.candidate_time->median_ms;
    }
  }
  return finish(verdict_category::pass, "Correct on all " + std::to_string(config_.trials) + " trials.");
}

result<verdict> engine::run_python(const task& t, const prepared_candidate& p) {
  auto dir = scratch_dir::create(config_.scratch_root, "py-");
  if (!dir) return dir.err();
  const std::vector<std::pair<std::string, std::string>> files{
      {"solution.py", p.code}, {"tests.py", t.tests}, {"runner.py", python_runner_source()}};
  for (const auto& [name, content] : files) {
    if (auto s = write_file(dir->path() / name, content); !s) return s.err();
  }
  const std::string nonce = random_nonce();
  run_request request;
  request.argv = {config_.python, "-I", "-B", "runner.py"};
  request.working_dir = dir->path();
  request.env = run_env(-1);
  request.limits = config_.python_limits;
  request.stdin_data = nonce + "\n";
  auto r = run_isolated(request);
  if (!r) return r.err();

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  auto text = read_untrusted_file(dir->path() / ".leap_result", k_max_result_json_bytes);
  if (text) {
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.value("nonce", std::string{}) == nonce) {
      auto fb = python_result_feedback(*text);
      if (!fb) return fb.err().wrap(t.id);
      return finish(fb->category, fb->text);
    }
    if (!r->timed_out) {
      return finish(verdict_category::runtime,
                    "Runtime error: the test runner's result was overwritten; do not write files named "
                    ".leap_result.");
    }
  }
  if (r->timed_out) {
    return finish(verdict_category::timeout,
                  timeout_feedback(std::chrono::duration<double>(request.limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(request.limits.cpu_seconds, true));
  }
  if (!r->exited) return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  return finish(verdict_category::runtime,
                "Runtime error: the program exited with code " + std::to_string(r->exit_code) +
                    " before the tests finished (do not call exit() or os._exit()).\n" +
                    stderr_tail(r->stderr_text, 600));
}

result<verdict> engine::run_kernelbench(const task& t, const prepared_candidate& p, int gpu) {
  auto dir = scratch_dir::create(config_.scratch_root, "kb-");
  if (!dir) return dir.err();
  const std::vector<std::pair<std::string, std::string>> files{
      {"solution.py", p.code}, {"problem.py", t.reference}, {"runner.py", kernelbench_runner_source()}};
  for (const auto& [name, content] : files) {
    if (auto s = write_file(dir->path() / name, content); !s) return s.err();
  }
  const std::string nonce = random_nonce();
  run_request request;
  request.argv = {config_.python, "-I", "-B", "runner.py"};
  request.working_dir = dir->path();
  request.env = run_env(gpu);
  request.limits = config_.kernelbench_limits;
  request.stdin_data = nonce + "\n";
  nlohmann::json cfg{{"trials", config_.trials}, {"seed", t.seed}, {"device", config_.kernelbench_device}};
  if (t.tol) {
    cfg["tolerances"] = {{"float32", {t.tol->atol, t.tol->rtol}}, {"float64", {t.tol->atol, t.tol->rtol}}};
    cfg["max_relative_l2"] = t.tol->max_relative_l2;
  }
  request.stdin_data += cfg.dump() + "\n";
  auto r = run_isolated(request);
  if (!r) return r.err();

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  auto text = read_untrusted_file(dir->path() / ".leap_result", k_max_result_json_bytes);
  if (text) {
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.value("nonce", std::string{}) == nonce) {
      auto fb = kernelbench_result_feedback(*text);
      if (!fb) return fb.err().wrap(t.id);
      return finish(fb->category, fb->text);
    }
    if (!r->timed_out) {
      return finish(verdict_category::runtime,
                    "Runtime error: the test runner's result was overwritten; do not write files named "
                    ".leap_result.");
    }
  }
  if (r->timed_out) {
    return finish(verdict_category::timeout,
                  timeout_feedback(std::chrono::duration<double>(request.limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(request.limits.cpu_seconds, true));
  }
  if (!r->exited) return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  return finish(verdict_category::runtime,
                "Runtime error: the program exited with code " + std::to_string(r->exit_code) +
                    " before the tests finished (do not call exit() or os._exit()).\n" +
                    stderr_tail(r->stderr_text, 600));
}

result<verdict> engine::run(const task& t, const prepared_candidate& prepared, int gpu) {
  if (prepared.final_verdict) return *prepared.final_verdict;
  if ((t.kind == task_kind::cpp || t.kind == task_kind::cuda) && prepared.expected == nullptr) {
    return error{t.id + ": run() of a candidate compiled without its reference"};
  }
  auto v = t.kind == task_kind::python        ? run_python(t, prepared)
           : t.kind == task_kind::kernelbench ? run_kernelbench(t, prepared, gpu)
                                              : run_native(t, prepared, gpu);
  if (!v) return v;
  v->compile_ms = prepared.compile_ms;
  v->cache_hit = prepared.cache_hit;
  return v;
}

result<verdict> engine::verify(const task& t, std::string_view answer, int gpu) {
  auto prepared = compile(t, answer);
  if (!prepared) return prepared.err();
  return run(t, *prepared, gpu);
}

}  // namespace leap::sandbox

// The native pipeline of the engine (cpp and cuda): the candidate's build with the checks on the
// compiler's view, the generated harness and judge, the reference's outputs and time, the CUDA
// probe and the GPU slots' keepers, and the run against the reference.
#include "common/crypto.hpp"
#include "sandbox/engine.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/forbidden.hpp"
#include "sandbox/kinds.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <optional>
#include <signal.h>
#include <sstream>
#include <thread>
#include <utility>

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace {

using detail::base_path;
using detail::clock_watch;
using detail::compile_log;
using detail::compiler_probe;
using detail::dir_of;
using detail::k_max_artifact_bytes;
using detail::make_verdict;
using detail::memory_feedback;

// 32 hex digits: the harness's stream format takes 16 bytes. From OpenSSL's CSPRNG, since the
// candidate must not be able to guess it and forge the harness's output.
result<std::string> stream_nonce() {
  auto nonce = crypto::random_hex(16);
  if (!nonce) {
    return nonce.err().wrap("the harness stream's nonce");
  }
  return nonce;
}

// CUDA errors that a healthy GPU does not give a candidate: worth asking the probe.
bool device_level_cuda_error(const std::string& name) {
  static const char* names[] = {"cudaErrorNoDevice",
                                "cudaErrorInsufficientDriver",
                                "cudaErrorInitializationError",
                                "cudaErrorDevicesUnavailable",
                                "cudaErrorSystemNotReady",
                                "cudaErrorSystemDriverMismatch",
                                "cudaErrorECCUncorrectable",
                                "cudaErrorStartupFailure",
                                "cudaErrorInvalidDevice",
                                "cudaErrorUnknown",
                                "cudaErrorCompatNotSupportedOnDevice",
                                "cudaErrorNotPermitted"};
  for (const char* n : names) {
    if (name == n) {
      return true;
    }
  }
  return false;
}

// Whether a failure the harness reported could be the GPU's rather than the candidate's: then the
// engine asks its own probe of the slot before judging.
bool may_be_the_gpus(const harness_failure& f) {
  switch (f.kind) {
    case harness_failure_kind::cuda_init:
    case harness_failure_kind::keeper:
      return true;
    case harness_failure_kind::cuda:
    case harness_failure_kind::other:  // a record the candidate forged: its name decides, as for
                                       // cuda
      return device_level_cuda_error(f.name);
    case harness_failure_kind::threads:
    case harness_failure_kind::stream:
    case harness_failure_kind::channel:
      return false;  // their names are the harness's own ("left_running", "unordered"), not CUDA's
  }
  return false;
}

const char* k_cuda_probe_source =
    R"(// The engine's own probe of a GPU slot: a known-good kernel and its known answer.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void leap_probe(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 3 * i + 1;
}
static int fail(const char* where, cudaError_t e) {
  std::fprintf(stderr, "%s: %s: %s\n", where, cudaGetErrorName(e), cudaGetErrorString(e));
  return 3;
}
static int h[1 << 16];
int main() {
  const int n = 1 << 16;
  int* d = nullptr;
  cudaError_t e = cudaMalloc(&d, n * sizeof(int));
  if (e != cudaSuccess) return fail("allocating device memory", e);
  leap_probe<<<(n + 255) / 256, 256>>>(d, n);
  if ((e = cudaGetLastError()) != cudaSuccess) return fail("launching a kernel", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail("running a kernel", e);
  if ((e = cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost)) != cudaSuccess) return fail("copying back", e);
  for (int i = 0; i < n; ++i) {
    if (h[i] != 3 * i + 1) {
      std::fprintf(stderr, "wrong value %d at %d\n", h[i], i);
      return 4;
    }
  }
  std::printf("LEAP_PROBE_OK\n");
  return 0;
}
)";

// Machine code for the one architecture only. -arch=sm_X would also embed PTX of compute_X for a
// later JIT, which nothing here uses (a run is on the machine the code was built for; an sm_90a
// PTX cannot be JIT-compiled for another GPU anyway) and which costs nvcc a noticeable part of a
// cold compile.
std::string gencode_flag(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) {
    return "-arch=" + arch;
  }
  return "-gencode=arch=compute_" + arch.substr(3) + ",code=" + arch;
}

// The toolchain's compiler with its configured flags (nvcc: and the configured architecture): how
// every program of the native pipeline starts its command. Empty for a toolchain that builds no
// native program (compile_native refuses its kinds).
std::vector<std::string> compiler_command(const engine_config& c, toolchain compiler) {
  std::vector<std::string> argv;
  switch (compiler) {
    case toolchain::cxx:
      argv = {c.cxx};
      for (auto& f : split_flags(c.cxx_flags)) {
        argv.push_back(std::move(f));
      }
      break;
    case toolchain::nvcc:
      argv = {c.nvcc};
      for (auto& f : split_flags(c.nvcc_flags)) {
        argv.push_back(std::move(f));
      }
      argv.push_back(gencode_flag(c.cuda_arch));
      break;
    case toolchain::none:
    case toolchain::python3:
      break;
  }
  return argv;
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
  for (const auto& a : argv) {
    line += (line.empty() ? "" : " ") + shell_word(a);
  }
  return line;
}

// Whether a compiler of the build said it ran out of memory (RLIMIT_DATA). Lines located in the
// candidate's file and excerpts (indented) are skipped: they can hold any text the candidate wrote.
bool out_of_memory(const std::string& log, const std::string& file) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == ' ' || line[0] == '\t' || line.rfind(file, 0) == 0) {
      continue;
    }
    if (line.find("out of memory") != std::string::npos ||
        line.find("memory exhausted") != std::string::npos ||
        line.find("std::bad_alloc") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Whether the kind's runs use the slot's GPU (kind_traits::gpu): the CUDA harness and its keeper,
// the CUDA run limits, the slot's probe and its clocks.
bool on_gpu(task_kind kind) { return traits_of(kind).gpu; }

}  // namespace

namespace detail {

std::vector<toolchain_program> toolchain_programs(const engine_config& c, toolchain compiler) {
  switch (compiler) {
    case toolchain::none:
      return {};
    case toolchain::cxx:
      return {{.program = c.cxx, .bound = false}};
    case toolchain::nvcc:
      return {{.program = c.nvcc, .bound = true}, {.program = c.cxx, .bound = false}};
    case toolchain::python3:
      return {{.program = c.python, .bound = true}};
  }
  return {};
}

}  // namespace detail

result<build_output> engine::build_in_sandbox(
    const std::vector<std::pair<std::string, std::string>>& files,
    const std::vector<std::string>& argv, const std::string& artifact,
    const std::vector<std::pair<std::string, std::string>>* env, const resource_limits* limits) {
  detail::build_request build;
  for (const auto& [name, content] : files) {
    build.files.push_back({name, &content});
  }
  build.argv = argv;
  build.artifact = artifact;
  // LC_ALL=C: plain ASCII quotes in diagnostics, the same text on every host.
  build.env = env != nullptr
                  ? *env
                  : std::vector<std::pair<std::string, std::string>>{
                        {"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}, {"LANG", "C"}};
  build.limits = limits != nullptr ? *limits : config_.compile_limits;
  build.readonly_paths = readonly_paths_;
  build.what = "running " + argv.front();
  return detail::run_build(config_.scratch_root, build);
}

result<std::vector<fs::path>> engine::system_include_dirs(task_kind kind) {
  std::lock_guard probe_lock(identity_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = include_dirs_.find(kind); it != include_dirs_.end()) {
      return it->second;
    }
  }
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) {
    return dir.err();
  }
  // The host compiler's list for every native toolchain: nvcc preprocesses with it too.
  std::vector<std::string> argv = compiler_command(config_, toolchain::cxx);
  for (const char* a : {"-E", "-v", "-x", "c++", "/dev/null", "-o", "/dev/null"}) {
    argv.emplace_back(a);
  }
  run_request request = compiler_probe(config_, readonly_paths_, dir->path(), std::move(argv));
  auto r = run_isolated(request);
  if (!r) {
    return r.err().wrap("finding the system header folders of " + config_.cxx);
  }
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
    if (line.rfind("#include <...> search starts here:", 0) == 0 ||
        line.rfind("#include \"...\" search starts here:", 0) == 0) {
      in_list = true;
    } else if (line.rfind("End of search list.", 0) == 0) {
      in_list = false;
    } else if (in_list && !line.empty() && line[0] == ' ') {
      add(line.substr(1));
    }
  }
  if (dirs.empty()) {
    return error{"'" + config_.cxx +
                 " -E -v' listed no system header folders: " + r->stderr_text.substr(0, 300)};
  }
  bool toolkit = false;
  switch (traits_of(kind).compiler) {
    case toolchain::cxx:
    case toolchain::none:
    case toolchain::python3:
      break;
    case toolchain::nvcc:
      toolkit = true;
      break;
  }
  if (toolkit) {
    // The toolkit's own headers, as nvcc itself finds them (see parse_nvcc_include_dirs).
    request.argv = {config_.nvcc, "--dryrun", "-E", "-x", "cu", "/dev/null", "-o", "/dev/null"};
    auto dry = run_isolated(request);
    if (!dry) {
      return dry.err().wrap("finding the toolkit's header folders with '" + config_.nvcc +
                            " --dryrun'");
    }
    const auto toolkit_dirs = parse_nvcc_include_dirs(dry->stderr_text + dry->stdout_text);
    if (toolkit_dirs.empty()) {
      return error{"'" + config_.nvcc + " --dryrun' named no header folders of the CUDA toolkit: " +
                   (dry->stderr_text + dry->stdout_text).substr(0, 300)};
    }
    for (const auto& d : toolkit_dirs) {
      add(d);
    }
  }
  std::lock_guard lock(mutex_);
  include_dirs_[kind] = dirs;
  return dirs;
}

result<build_output> engine::build_candidate(const task& t, const std::string& source,
                                             const std::string& object,
                                             const std::vector<fs::path>& system_dirs) {
  const toolchain compiler = traits_of(t.kind).compiler;
  const std::string stem = "solution";
  const std::string file = stem + candidate_extension(t.kind);
  // g++'s front-end dump, where every use of a name is fully qualified (nvcc has none).
  bool dump_names = false;
  // nvcc preprocesses in its compile step: a failed step 11 that left no preprocessed file failed
  // in preprocessing.
  bool preprocessed_by_compile = false;
  std::vector<std::string> command = compiler_command(config_, compiler);
  switch (compiler) {
    case toolchain::cxx:
      dump_names = !t.forbidden.empty();
      command.emplace_back("-pthread");
      break;
    case toolchain::nvcc:
      preprocessed_by_compile = true;
      break;
    case toolchain::none:
    case toolchain::python3:
      break;
  }
  auto with = [&](std::initializer_list<std::string> extra) {
    std::vector<std::string> argv = command;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return shell_line(argv);
  };
  // Exit codes: 10 preprocessing, 11 compiling, 13 linking.
  std::string script;
  if (config_.compile_memory_bytes > 0) {
    script += "ulimit -d " + std::to_string(config_.compile_memory_bytes / 1024) + " 2>/dev/null\n";
  }
  switch (compiler) {
    case toolchain::nvcc:
      // --keep leaves the device and host preprocessed files (.cpp1.ii, .cpp4.ii) whose line
      // markers say what was included; nvcc writes them anyway.
      script += with({"-c", file, "-o", stem + ".o", "--keep", "-Xcompiler",
                      "-Xassembler,--MD,-Xassembler," + stem + ".asd"}) +
                " || exit 11\n";
      break;
    case toolchain::cxx: {
      // One compiler run when it succeeds (-MD lists what the preprocessor opened). g++ writes no
      // dependency file for a failed compile, so then a preprocessing run alone lists them (its
      // messages repeat the compile's and are dropped).
      std::string line = with(
          {"-c", file, "-o", stem + ".o", "-MD", "-MF", stem + ".d", "-Wa,--MD," + stem + ".asd"});
      if (dump_names) {
        line += " " + shell_word("-fdump-tree-original=" + stem + ".tree");
      }
      // Preprocessing real code takes a few MiB: a quarter of the limit bounds an endless include
      // sooner the second time.
      const std::string preprocess_limit =
          config_.compile_memory_bytes > 0
              ? "ulimit -d " + std::to_string(config_.compile_memory_bytes / 4096) +
                    " 2>/dev/null; "
              : "";
      script += line + " || { (" + preprocess_limit + "exec " +
                with({"-E", "-MD", "-MF", stem + ".d", "-o", "/dev/null", file}) +
                ") 2>/dev/null || exit 10; exit 11; }\n";
      break;
    }
    case toolchain::none:
    case toolchain::python3:
      break;
  }
  script += with({"harness.o", stem + ".o", "-o", "cand"}) + " || exit 13\n";

  auto dir =
      detail::make_run_folder(config_.scratch_root, "build-",
                              {{file, &source}, {"harness.o", &object}, {"build.sh", &script}});
  if (!dir) {
    return dir.err();
  }
  run_request request;
  request.argv = {"/bin/sh", "build.sh"};
  request.working_dir = dir->path();
  request.env = {{"PATH", base_path(dir_of(config_.nvcc))}, {"LC_ALL", "C"}, {"LANG", "C"}};
  request.limits = config_.compile_limits;
  request.readonly_paths = readonly_paths_;
  auto r = run_isolated(request);
  if (!r) {
    return r.err().wrap("running the build of " + file);
  }
  build_output out;
  out.log = compile_log(*r);
  if (r->timed_out || r->signal == SIGXCPU) {
    out.timed_out = true;
    return out;
  }
  const int step = r->exited ? r->exit_code : -1;
  auto refuse = [&](verdict_category category, std::string text) {
    out.ok = false;
    out.refusal_category = category;
    out.refusal = std::move(text);
    return out;
  };
  auto read = [&](const std::string& name, std::size_t cap) -> std::optional<std::string> {
    auto bytes = read_untrusted_file(dir->path() / name, cap);
    if (!bytes) {
      return std::nullopt;
    }
    return std::move(bytes.value());
  };

  // 1. What the preprocessor opened, decided before any compiler message is looked at.
  include_policy policy{file, system_dirs, forbidden_libraries(t.forbidden)};
  bool saw_includes = false;
  switch (compiler) {
    case toolchain::nvcc:
      for (const char* pass : {".cpp1.ii", ".cpp4.ii"}) {
        auto text = read(stem + pass, k_max_artifact_bytes);
        if (!text) {
          continue;
        }
        saw_includes = true;
        if (auto hit = check_included_files(parse_line_markers(*text), policy)) {
          return refuse(verdict_category::forbidden, hit->reason);
        }
      }
      break;
    case toolchain::cxx:
      if (auto deps = read(stem + ".d", 16 << 20)) {
        saw_includes = true;
        if (auto hit = check_included_files(parse_make_deps(*deps), policy)) {
          return refuse(verdict_category::forbidden, hit->reason);
        }
      }
      break;
    case toolchain::none:
    case toolchain::python3:
      break;
  }
  if (step == 10 || (preprocessed_by_compile && step == 11 && !saw_includes) ||
      (!r->exited && !saw_includes)) {
    if (out_of_memory(out.log, file) || !r->exited) {
      // Preprocessing real code takes a few MiB: this is an include of a device or an endless file,
      // or a macro bomb. Forbidden rather than a compile error, without quoting anything.
      return refuse(
          verdict_category::forbidden,
          "Compilation was stopped: preprocessing " + file + " ran out of memory (limit " +
              std::to_string(config_.compile_memory_bytes >> 20) +
              " MiB). Include only system headers; a file that never ends (a device) is not "
              "one.");
    }
    if (!saw_includes) {
      // Nothing says which files were read: keep only the lines located in the candidate's file.
      std::istringstream lines(out.log);
      std::string kept;
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind(file + ":", 0) == 0 || line.rfind(file + "(", 0) == 0) {
          kept += line + "\n";
        }
      }
      out.log = kept;
    }
    return out;  // the candidate's own preprocessing errors
  }
  // 2. Files the assembler read (.incbin, .include).
  if (auto asd = read(stem + ".asd", 1 << 20)) {
    if (auto hit = check_assembler_files(parse_make_deps(*asd), stem)) {
      return refuse(verdict_category::forbidden, hit->reason);
    }
  }
  if (step == 11 || !r->exited) {
    if (out_of_memory(out.log, file) || !r->exited) {
      return refuse(verdict_category::compile,
                    "Compilation was stopped: compiling " + file + " ran out of memory (limit " +
                        std::to_string(config_.compile_memory_bytes >> 20) +
                        " MiB; runaway templates or constexpr evaluation?).");
    }
    return out;
  }
  // 3. Forbidden names as the compiler resolved them.
  if (dump_names) {
    auto dump = read(stem + ".tree", 256ULL << 20);
    if (!dump) {
      return refuse(verdict_category::compile,
                    "Compilation failed: the program is too large to check.");
    }
    if (auto hit = find_forbidden_in_dump(*dump, t.forbidden)) {
      return refuse(verdict_category::forbidden, hit->reason);
    }
  }
  // 4. The object's symbols.
  auto candidate_object = read(stem + ".o", k_max_artifact_bytes);
  if (!candidate_object) {
    return refuse(verdict_category::compile,
                  "Compilation failed: the compiler wrote no object file.");
  }
  auto candidate_symbols = parse_elf_symbols(*candidate_object);
  if (!candidate_symbols) {
    return refuse(verdict_category::compile,
                  "Compilation failed: the object file cannot be read (" +
                      candidate_symbols.err().message + ").");
  }
  auto harness_symbols = parse_elf_symbols(object);
  if (!harness_symbols) {
    return harness_symbols.err().wrap("the harness object of " + t.id);
  }
  if (auto hit = check_object_symbols(*candidate_symbols, *harness_symbols, t.forbidden, file)) {
    return refuse(verdict_category::forbidden, hit->reason);
  }
  if (step != 0) {
    return out;  // link errors
  }
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
  const bool gpu = on_gpu(t.kind);
  auto identity = compiler_identity(t.kind);
  if (!identity) {
    return identity.err();
  }
  const std::string source =
      harness_source(t, gpu ? harness_flavour::cuda_candidate : harness_flavour::host_candidate,
                     traits_of(t.kind).entry);
  // The CUDA harness is host code only: g++ against the toolkit's headers builds it several times
  // faster than nvcc, and nvcc links it with the candidate (same host compiler, same ABI).
  fs::path cuda_include;
  if (gpu) {
    auto dirs = system_include_dirs(t.kind);
    if (!dirs) {
      return dirs.err();
    }
    for (const auto& d : *dirs) {
      if (fs::exists(d / "cuda_runtime.h")) {
        cuda_include = d;
        break;
      }
    }
  }
  const bool host_compiled = !gpu || !cuda_include.empty();
  const std::string file = host_compiled ? "harness.cpp" : "harness.cu";
  std::vector<std::string> argv =
      compiler_command(config_, host_compiled ? toolchain::cxx : toolchain::nvcc);
  if (host_compiled && gpu) {
    argv.push_back("-I" + cuda_include.string());
  }
  for (const char* a : {"-c", "", "-o", "harness.o"}) {
    argv.emplace_back(*a ? a : file.c_str());
  }
  return generated_program(t, "harness", *identity, file, source, argv, "harness.o");
}

result<std::string> engine::generated_program(const task& t, const std::string& what,
                                              const std::string& identity, const std::string& file,
                                              const std::string& source,
                                              const std::vector<std::string>& argv,
                                              const std::string& artifact) {
  std::string key_material = (what == "harness" ? "harness-object" : what) + "\n" + identity + "\n";
  for (const auto& a : argv) {
    key_material += a + "\n";
  }
  key_material += source;
  auto lookup = cache_->get_or_build(crypto::sha256_hex(key_material), [&] {
    return build_in_sandbox({{file, source}}, argv, artifact);
  });
  if (!lookup) {
    return lookup.err();
  }
  if (!lookup->output.ok) {
    if (lookup->output.timed_out) {
      return error{t.id + ": building the " + what + " timed out (is the host overloaded?)"};
    }
    return error{t.id + ": the generated " + what + " does not compile (check the task's args):\n" +
                 lookup->output.log.substr(0, 2000)};
  }
  return lookup->output.artifact;
}

result<std::string> engine::judge_program(const task& t, bool gpu, bool for_profiler) {
  // Host code for every kind: the CUDA judge's device work is the keeper's.
  auto identity = compiler_identity(task_kind::cpp);
  if (!identity) {
    return identity.err();
  }
  const std::string source = judge_source(t, gpu);
  std::vector<std::string> argv = compiler_command(config_, toolchain::cxx);
  // Linked statically: no dynamic loading at each of its starts (3 ms of a 10 ms warm run).
  if (!for_profiler) {
    argv.emplace_back("-static");
  }
  for (const char* a : {"judge.cpp", "-o", "judge"}) {
    argv.emplace_back(a);
  }
  return generated_program(t, gpu ? "cuda judge" : "judge", *identity, "judge.cpp", source, argv,
                           "judge");
}

namespace {

// What a host reference runs on, as the engine can read it: the CPU's model (/proc/cpuinfo) and
// the count of CPUs online. Part of a kept reference time's key: another machine times again.
std::string host_cpu_identity() {
  std::string model;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  // x86's "model name"; arm64 kernels name no model, only the part and its implementer.
  for (const char* field : {"model name", "CPU implementer", "CPU part", "Hardware"}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line)) {
      if (const auto colon = line.find(':');
          line.starts_with(field) && colon != std::string::npos) {
        const auto value = line.find_first_not_of(" \t", colon + 1);
        model +=
            (model.empty() ? "" : " ") + (value == std::string::npos ? "?" : line.substr(value));
        break;
      }
    }
    if (field == std::string_view("model name") && !model.empty()) {
      break;
    }
  }
  return "cpu " + (model.empty() ? std::string("unknown") : model) + " x" +
         std::to_string(std::thread::hardware_concurrency());
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// A host reference's time as kept in the compile cache: "LREFTIM1 <sha256 of the JSON>\n<JSON>".
// The JSON names the task, so that a user can find one task's entries (`grep -rl LREFTIM1`).
constexpr std::string_view k_reference_time_magic = "LREFTIM1";

struct kept_reference_time {
  timing_stats time;
  std::string measured_at;  // UTC, ISO 8601
  std::string host;
};

std::string pack_reference_time(const std::string& task_id, const kept_reference_time& k) {
  const nlohmann::json j{{"task", task_id},
                         {"host", k.host},
                         {"measured_at", k.measured_at},
                         {"time",
                          {{"median_ms", k.time.median_ms},
                           {"min_ms", k.time.min_ms},
                           {"max_ms", k.time.max_ms},
                           {"q1_ms", k.time.q1_ms},
                           {"q3_ms", k.time.q3_ms},
                           {"reps", k.time.reps}}}};
  const std::string payload = j.dump();
  return std::string(k_reference_time_magic) + " " + crypto::sha256_hex(payload) + "\n" + payload;
}

// The time back, or nullopt when the artifact is not one pack_reference_time wrote whole for
// `reps` repetitions (a damaged entry is never trusted).
std::optional<kept_reference_time> unpack_reference_time(const std::string& a, int reps) {
  const std::size_t head = k_reference_time_magic.size() + 1 + 64 + 1;
  if (a.size() < head || !a.starts_with(k_reference_time_magic) || a[head - 1] != '\n' ||
      crypto::sha256_hex(std::string_view(a).substr(head)) !=
          a.substr(k_reference_time_magic.size() + 1, 64)) {
    return std::nullopt;
  }
  const auto j = nlohmann::json::parse(a.substr(head), nullptr, false);
  if (!j.is_object() || !j.contains("measured_at") || !j["measured_at"].is_string() ||
      !j.contains("host") || !j["host"].is_string() || !j.contains("time") ||
      !j["time"].is_object()) {
    return std::nullopt;
  }
  kept_reference_time k;
  k.measured_at = j["measured_at"].get<std::string>();
  k.host = j["host"].get<std::string>();
  const auto& t = j["time"];
  for (auto [name, target] :
       {std::pair{"median_ms", &k.time.median_ms}, std::pair{"min_ms", &k.time.min_ms},
        std::pair{"max_ms", &k.time.max_ms}, std::pair{"q1_ms", &k.time.q1_ms},
        std::pair{"q3_ms", &k.time.q3_ms}}) {
    if (!t.contains(name) || !t[name].is_number() || !std::isfinite(t[name].get<double>())) {
      return std::nullopt;
    }
    *target = t[name].get<double>();
  }
  if (!t.contains("reps") || !t["reps"].is_number_integer() || t["reps"].get<int>() != reps) {
    return std::nullopt;
  }
  k.time.reps = reps;
  const timing_stats& s = k.time;
  if (!(s.min_ms >= 0 && s.min_ms <= s.q1_ms && s.q1_ms <= s.median_ms && s.median_ms <= s.q3_ms &&
        s.q3_ms <= s.max_ms)) {
    return std::nullopt;
  }
  return k;
}

}  // namespace

result<engine::reference_data> engine::reference_outputs(const task& t) {
  auto identity = compiler_identity(task_kind::cpp);
  if (!identity) {
    return identity.err();
  }
  const std::string harness =
      harness_source(t, harness_flavour::host_reference, entry_linkage::cpp);
  std::vector<std::string> argv = compiler_command(config_, toolchain::cxx);
  for (const char* a : {"-pthread", "harness.cpp", "reference.cpp", "-o", "ref"}) {
    argv.emplace_back(a);
  }
  std::string key_material = "reference\n" + *identity + "\n";
  for (const auto& a : argv) {
    key_material += a + "\n";
  }
  key_material += harness + "\n--reference--\n" + t.reference;
  const std::string build_key = crypto::sha256_hex(key_material);
  const std::string run_key = build_key + "/" + std::to_string(t.seed) + "/" +
                              std::to_string(config_.trials) + "/" +
                              std::to_string(config_.timing_reps);

  auto compute = [&]() -> result<reference_data> {
    auto judge = judge_program(t, false);
    if (!judge) {
      return judge.err();
    }
    auto lookup = cache_->get_or_build(build_key, [&] {
      return build_in_sandbox({{"harness.cpp", harness}, {"reference.cpp", t.reference}}, argv,
                              "ref");
    });
    if (!lookup) {
      return lookup.err();
    }
    if (!lookup->output.ok) {
      if (lookup->output.timed_out) {
        return error{t.id + ": building the reference timed out (is the host overloaded?)"};
      }
      return error{t.id + ": the task's reference does not compile:\n" +
                   lookup->output.log.substr(0, 2000)};
    }
    auto dir = detail::make_run_folder(
        config_.scratch_root, "ref-",
        {{"ref", &lookup->output.artifact, true}, {"judge", &judge.value(), true}});
    if (!dir) {
      return dir.err();
    }
    run_request request;
    const auto fresh_nonce = stream_nonce();
    if (!fresh_nonce) {
      return fresh_nonce.err();
    }
    const std::string& nonce = *fresh_nonce;
    request.argv = {"./judge",
                    std::to_string(t.seed),
                    std::to_string(config_.trials),
                    std::to_string(config_.timing_reps),
                    "./ref",
                    "reference"};
    request.working_dir = dir->path();
    request.env = {{"PATH", base_path("")}, {"LANG", "C.UTF-8"}};
    request.stdin_data = nonce + "\n";
    request.limits = config_.run_limits;
    request.limits.wall *= 6;
    request.limits.cpu_seconds *= 6;
    request.readonly_paths = readonly_paths_;
    request.limits.output_cap_bytes = k_max_artifact_bytes;  // the reference's stream, whole
    auto r = run_isolated(request);
    if (!r) {
      return r.err().wrap(t.id + ": running the reference");
    }
    if (!r->exited || r->exit_code != 0) {
      return error{t.id + ": the task's reference failed (" +
                   (r->timed_out ? std::string("timed out")
                    : r->exited  ? "exit code " + std::to_string(r->exit_code)
                                 : signal_name(r->signal)) +
                   "): " + r->stderr_text.substr(0, 1000)};
    }
    if (r->stdout_truncated) {
      return error{t.id + ": the reference's output is larger than " +
                   std::to_string(k_max_artifact_bytes) + " bytes"};
    }
    auto dump = parse_dump(r->stdout_text, t, nonce);
    if (!dump) {
      return dump.err().wrap(t.id + ": reference output");
    }
    if (!dump->complete) {
      return error{t.id + ": the reference's output is incomplete"};
    }
    reference_data data;
    if (config_.timing_reps > 0) {
      auto time = reference_time(t, run_key, dump->rep_ms);
      if (!time) {
        return time.err();
      }
      data.time = time->first;
      data.time_note = std::move(time->second);
    }
    data.expected = std::make_shared<harness_dump>(std::move(dump.value()));
    data.judge = std::make_shared<const std::string>(std::move(judge.value()));
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
  if (!mine) {
    return future.get();
  }
  auto computed = compute();
  if (!computed) {
    // Not remembered: the next candidate retries (the failure may be the host's, not the task's).
    std::lock_guard lock(mutex_);
    references_.erase(run_key);
  }
  promise.set_value(computed);
  return computed;
}

result<std::pair<std::optional<timing_stats>, std::string>> engine::reference_time(
    const task& t, const std::string& run_key, const std::vector<double>& rep_ms) {
  // Kept in the compile cache, so that other engines and processes on it (`leap verify` runs,
  // verifier nodes, a resumed run) compare against one measurement of the reference instead of
  // each taking its own: the speedup's spread across them is then the candidate's alone. The key
  // adds the judge's source (a change of protocol measures again) and the host the reference ran
  // on; run_key holds the reference's build (compiler, flags, harness, source), seed, trials and
  // repetitions. Only a complete measurement goes in, under a digest checked when read back.
  const std::string host = host_cpu_identity();
  const std::string key =
      crypto::sha256_hex("reference time v1\n" + run_key + "\n" +
                         crypto::sha256_hex(judge_source(t, false)) + "\n" + host);
  std::optional<timing_stats> measured;
  if (rep_ms.size() == static_cast<std::size_t>(config_.timing_reps)) {
    measured = timing_stats_of(rep_ms);
  }
  auto keep = [&]() -> result<build_output> {
    build_output out;
    out.ok = measured.has_value();  // not ok: not stored (cache_failures is off)
    if (measured) {
      out.artifact = pack_reference_time(t.id, {*measured, utc_now(), host});
    }
    return out;
  };
  auto timed_now =
      [&](const std::string& how) -> std::pair<std::optional<timing_stats>, std::string> {
    ++reference_timings_;
    return {measured, "reference timed now (" + how + ")"};
  };
  auto lookup = cache_->get_or_build(key, keep, /*cache_failures=*/false);
  if (!lookup) {
    return lookup.err();
  }
  if (!lookup->hit && !lookup->shared) {
    return timed_now(!measured                      ? "incomplete: not kept"
                     : config_.cache_max_bytes == 0 ? "no compile cache on disk: not kept"
                                                    : "kept in the compile cache");
  }
  if (auto kept = unpack_reference_time(lookup->output.artifact, config_.timing_reps);
      kept && lookup->output.ok) {
    // This run's own times are not used: one measurement for every verification on this cache.
    return std::pair{std::optional<timing_stats>(kept->time),
                     "reference time kept from " + kept->measured_at + " (compile cache)"};
  }
  // A damaged entry: not trusted, replaced by this run's measurement.
  cache_->drop(key);
  auto replaced = cache_->get_or_build(key, keep, /*cache_failures=*/false);
  if (!replaced) {
    return replaced.err();
  }
  return timed_now("the kept time was damaged; replaced");
}

result<prepared_candidate> engine::compile_native(const task& t, prepared_candidate p,
                                                  bool with_reference) {
  const toolchain compiler = traits_of(t.kind).compiler;
  if (compiler_command(config_, compiler).empty()) {
    return error{t.id + ": " + std::string(to_string(t.kind)) +
                 " tasks have no native build (their toolchain builds no program)"};
  }
  auto object = harness_object(t);
  if (!object) {
    return object.err();
  }
  auto identity = compiler_identity(t.kind);
  if (!identity) {
    return identity.err();
  }
  auto system_dirs = system_include_dirs(t.kind);
  if (!system_dirs) {
    return system_dirs.err();
  }
  const std::string file = std::string("solution") + candidate_extension(t.kind);
  // The code exactly as the model wrote it, so compiler line numbers and excerpts are its own.
  const std::string& source = p.code;
  // Everything the outcome depends on: the checks' inputs (forbidden list, header folders, memory
  // limit) as much as the compiler's.
  std::string key_material = "candidate-v2\n" + *identity + "\n";
  switch (compiler) {
    case toolchain::cxx:
      key_material += config_.cxx + "\n" + config_.cxx_flags;
      break;
    case toolchain::nvcc:
      key_material += config_.nvcc + "\n" + config_.nvcc_flags + "\n" + config_.cuda_arch;
      break;
    case toolchain::none:
    case toolchain::python3:
      break;
  }
  key_material += "\n";
  key_material += std::to_string(config_.compile_memory_bytes) + "\n";
  for (const auto& item : t.forbidden) {
    key_material += "forbid " + item + "\n";
  }
  for (const auto& d : *system_dirs) {
    key_material += "sys " + d.string() + "\n";
  }
  key_material += crypto::sha256_hex(*object) + "\n" + source;
  auto lookup = cache_->get_or_build(crypto::sha256_hex(key_material), [&] {
    return build_candidate(t, source, *object, *system_dirs);
  });
  if (!lookup) {
    return lookup.err();
  }
  p.compile_ms = lookup->build_ms;
  p.cache_hit = lookup->hit || lookup->shared;
  if (!lookup->output.ok && lookup->output.refusal_category) {
    verdict v = make_verdict(*lookup->output.refusal_category,
                             trim_to_budget(lookup->output.refusal, config_.feedback.char_budget));
    v.compile_ms = p.compile_ms;
    v.cache_hit = p.cache_hit;
    p.final_verdict = std::move(v);
    return p;
  }
  if (!lookup->output.ok) {
    const double limit = std::chrono::duration<double>(config_.compile_limits.wall).count();
    std::string text = lookup->output.timed_out
                           ? "Compilation did not finish within " +
                                 std::to_string(static_cast<int>(limit)) +
                                 " s and was stopped (runaway templates or constexpr evaluation?)."
                           : compile_feedback(lookup->output.log, file, entry_signature(t, "solve"),
                                              config_.feedback);
    verdict v = make_verdict(verdict_category::compile, std::move(text));
    v.compile_ms = p.compile_ms;
    v.cache_hit = p.cache_hit;
    v.diagnostics = lookup->output.log.substr(0, 4000);
    p.final_verdict = std::move(v);
    return p;
  }
  p.binary = std::move(lookup->output.artifact);
  if (!with_reference) {
    return p;
  }
  auto reference = reference_outputs(t);
  if (!reference) {
    return reference.err();
  }
  p.expected = reference->expected;
  p.reference_time = reference->time;
  p.reference_time_note = reference->time_note;
  if (on_gpu(t.kind)) {
    auto judge = judge_program(t, true);
    if (!judge) {
      return judge.err();
    }
    p.judge = std::make_shared<const std::string>(std::move(judge.value()));
  } else {
    p.judge = reference->judge;
  }
  return p;
}

result<std::string> engine::cuda_probe_binary() {
  std::lock_guard lock(probe_mutex_);
  if (probe_binary_) {
    return *probe_binary_;
  }
  auto identity = compiler_identity(task_kind::cuda);
  if (!identity) {
    return identity.err();
  }
  std::vector<std::string> argv = compiler_command(config_, toolchain::nvcc);
  for (const char* a : {"probe.cu", "-o", "probe"}) {
    argv.emplace_back(a);
  }
  std::string key_material = "cuda-probe\n" + *identity + "\n";
  for (const auto& a : argv) {
    key_material += a + "\n";
  }
  key_material += k_cuda_probe_source;
  auto lookup = cache_->get_or_build(crypto::sha256_hex(key_material), [&] {
    return build_in_sandbox({{"probe.cu", k_cuda_probe_source}}, argv, "probe");
  });
  if (!lookup) {
    return lookup.err().wrap("building the CUDA probe");
  }
  if (!lookup->output.ok) {
    return error{"the CUDA probe does not build" +
                 std::string(lookup->output.timed_out ? " (timed out)" : "") + ": " +
                 lookup->output.log.substr(0, 1000)};
  }
  probe_binary_ = lookup->output.artifact;
  return *probe_binary_;
}

result<std::string> engine::keeper_program() {
  if (keeper_binary_) {
    return *keeper_binary_;
  }
  auto identity = compiler_identity(task_kind::cuda);
  if (!identity) {
    return identity.err();
  }
  std::vector<std::string> argv = compiler_command(config_, toolchain::nvcc);
  // Each session's copies and sums on its own thread's stream: sessions do not wait for each
  // other.
  for (const char* a : {"--default-stream", "per-thread", "keeper.cu", "-o", "keeper"}) {
    argv.emplace_back(a);
  }
  std::string key_material = "gpu-keeper\n" + *identity + "\n";
  for (const auto& a : argv) {
    key_material += a + "\n";
  }
  key_material += keeper_source();
  auto lookup = cache_->get_or_build(crypto::sha256_hex(key_material), [&] {
    return build_in_sandbox({{"keeper.cu", keeper_source()}}, argv, "keeper");
  });
  if (!lookup) {
    return lookup.err().wrap("building the GPU keeper");
  }
  if (!lookup->output.ok) {
    return error{"the GPU keeper does not build" +
                 std::string(lookup->output.timed_out ? " (timed out)" : "") + ": " +
                 lookup->output.log.substr(0, 1000)};
  }
  keeper_binary_ = lookup->output.artifact;
  return *keeper_binary_;
}

result<int> engine::keeper_session(int gpu) {
  std::lock_guard lock(keeper_mutex_);
  auto binary = keeper_program();
  if (!binary) {
    return binary.err();
  }
  auto& keeper = keepers_[gpu];
  if (keeper && !keeper->alive()) {
    keeper.reset();
  }
  // A keeper that died since its last session is started again, once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!keeper) {
      auto started = detail::gpu_keeper::start(config_.scratch_root, *binary, run_env(gpu),
                                               config_.cuda_run_limits.wall);
      if (!started) {
        return started.err();
      }
      keeper = std::move(*started);
    }
    auto session = keeper->session();
    if (session) {
      return session;
    }
    keeper.reset();
  }
  return error{"the GPU keeper ended twice in a row"};
}

void engine::drop_keeper(int gpu) {
  std::unique_ptr<detail::gpu_keeper> ended;
  {
    std::lock_guard lock(keeper_mutex_);
    if (auto it = keepers_.find(gpu); it != keepers_.end()) {
      ended = std::move(it->second);
      keepers_.erase(it);
    }
  }
  // Ended outside the lock: another slot's runs need not wait for it.
}

bool engine::keeper_alive(int gpu) {
  std::lock_guard lock(keeper_mutex_);
  auto it = keepers_.find(gpu);
  return it != keepers_.end() && it->second && it->second->alive();
}

status engine::probe_native_slot(task_kind kind, int gpu) {
  if (!on_gpu(kind)) {
    return ok_status();  // a CPU slot: nothing of its own to probe
  }
  auto binary = cuda_probe_binary();
  if (!binary) {
    return binary.err();
  }
  auto dir = detail::make_run_folder(config_.scratch_root, "probe-", {{"probe", &*binary, true}});
  if (!dir) {
    return dir.err();
  }
  run_request request;
  request.argv = {"./probe"};
  request.working_dir = dir->path();
  request.env = run_env(gpu);
  request.limits = config_.cuda_run_limits;
  request.readonly_paths = readonly_paths_;
  auto r = run_isolated(request);
  if (!r) {
    return r.err().wrap("running the CUDA probe");
  }
  if (r->exited && r->exit_code == 0 && r->stdout_text.find("LEAP_PROBE_OK") != std::string::npos) {
    return ok_status();
  }
  const std::string how = detail::how_it_ended(*r);
  std::string said = r->stderr_text.substr(0, 500);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) {
    said.pop_back();
  }
  return error{"the engine's CUDA probe failed (" + how + ")" + (said.empty() ? "" : ": " + said)};
}

result<verdict> engine::run_native(const task& t, const prepared_candidate& p, int gpu,
                                   int sharing) {
  const bool gpu_run = on_gpu(t.kind);  // the CUDA harness, the slot's keeper and its GPU
  const int slot_gpu = gpu_run ? gpu : -1;
  // Candidates run under the task's judge (harness.hpp), which starts ./cand itself.
  if (!p.judge) {
    return error{t.id + ": the candidate was prepared without its task's judge"};
  }
  auto dir = detail::make_run_folder(config_.scratch_root, "run-",
                                     {{"cand", &p.binary, true}, {"judge", &*p.judge, true}});
  if (!dir) {
    return infrastructure_error(slot_gpu, dir.err().message);
  }
  const harness_dump& expected = *p.expected;
  const auto fresh_nonce = stream_nonce();
  if (!fresh_nonce) {
    return infrastructure_error(slot_gpu, fresh_nonce.err().message);
  }
  const std::string& nonce = *fresh_nonce;
  run_request request;
  if (gpu_run) {
    auto session = keeper_session(slot_gpu);
    if (!session) {
      // The slot's fault either way; the engine's probe, when it fails too, says it the usual way.
      std::string why = session.err().wrap("the slot's GPU keeper").message;
      if (auto probe = probe_slot(task_kind::cuda, gpu); !probe) {
        why = probe.err().message + "; " + why;
      }
      return infrastructure_error(slot_gpu, why);
    }
    request.pass_fd = *session;  // the judge's descriptor 3
  }
  request.argv = {"./judge", std::to_string(t.seed), std::to_string(config_.trials),
                  std::to_string(config_.timing_reps), "./cand"};
  request.working_dir = dir->path();
  request.env = run_env(slot_gpu);
  request.stdin_data = nonce + "\n";
  request.limits = gpu_run ? config_.cuda_run_limits : config_.run_limits;
  request.readonly_paths = readonly_paths_;
  // The whole stream must come back: the harness writes exactly as many bytes as the reference's
  // (same records, same counts) or an error record; anything beyond is the candidate's.
  request.limits.output_cap_bytes =
      std::max(request.limits.output_cap_bytes, expected.bytes + (64 << 10));
  const clock_watch clocks(slot_gpu, gpu_run && config_.timing_reps > 0);
  auto r = run_isolated(request);
  if (!r) {
    return infrastructure_error(slot_gpu, r.err().wrap("starting the candidate").message);
  }
  const clock_window window = clocks.finish();

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  if (r->memory_exceeded) {
    return finish(verdict_category::runtime, memory_feedback(request.limits));
  }
  if (r->scratch_exceeded) {
    return finish(verdict_category::runtime, scratch_feedback(*r, request.limits));
  }
  auto tampered = [&](const std::string& what) {
    return finish(verdict_category::runtime,
                  "Runtime error: the harness's output was tampered with (" + what +
                      "); solve() must not write to file descriptors it did not open.");
  };
  if (r->timed_out) {
    return finish(
        verdict_category::timeout,
        timeout_feedback(std::chrono::duration<double>(request.limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(request.limits.cpu_seconds, true));
  }
  if (r->stdout_truncated) {
    return tampered(std::to_string(r->stdout_bytes) + " bytes where the harness writes at most " +
                    std::to_string(expected.bytes));
  }
  const std::vector<std::uint64_t>* counts =
      expected.trials.empty() ? nullptr : &expected.trials.front().counts;
  auto parsed = parse_dump(r->stdout_text, t, nonce, counts);
  if (!parsed) {
    return tampered(parsed.err().message);
  }
  harness_dump& got = parsed.value();

  if (got.complete && r->exited && r->exit_code == 0) {
    if (got.trials.size() != expected.trials.size() || got.extra.size() != expected.extra.size()) {
      return tampered("a run of " + std::to_string(got.trials.size() + got.extra.size()) +
                      " calls, not " +
                      std::to_string(expected.trials.size() + expected.extra.size()));
    }
    // The inputs as the candidate left them against the reference's as generated: the engine's
    // own comparison, not a flag the harness reports.
    auto mark_inputs = [&](std::vector<trial_dump>& calls,
                           const std::vector<trial_dump>& want) -> std::optional<std::string> {
      for (std::size_t c = 0; c < calls.size(); ++c) {
        if (calls[c].counts != want[c].counts ||
            calls[c].input_hashes.size() != want[c].input_hashes.size()) {
          return "element counts of call " + std::to_string(c + 1);
        }
        std::size_t k = 0;
        for (const auto& a : t.args) {
          if (a.role != arg_role::input) {
            continue;
          }
          if (calls[c].input_hashes[k] != want[c].input_hashes[k]) {
            calls[c].modified_inputs.push_back(a.name);
          }
          ++k;
        }
      }
      return std::nullopt;
    };
    if (auto bad = mark_inputs(got.trials, expected.trials)) {
      return tampered(*bad);
    }
    if (auto bad = mark_inputs(got.extra, expected.extra)) {
      return tampered(*bad);
    }
    if (auto m = compare_dumps(t, expected, got)) {
      return finish(verdict_category::wrong_answer, mismatch_feedback(*m));
    }
    if (!got.extra.empty()) {
      // The warm-up and the timed repetitions get fresh inputs in the same buffers and are checked
      // like the trials: outputs cached by address or left from an earlier call fail here.
      harness_dump e_extra, g_extra;
      e_extra.trials = expected.extra;
      g_extra.trials = std::move(got.extra);
      if (auto m = compare_dumps(t, e_extra, g_extra)) {
        return finish(verdict_category::wrong_answer,
                      "In the timed runs (every call gets fresh inputs in the same buffers and is "
                      "checked; \"trial\" "
                      "counts the timed calls): " +
                          mismatch_feedback(*m));
      }
    }
    if (!got.rep_ms.empty()) {
      v.candidate_time = timing_stats_of(got.rep_ms);
      v.reference_time = p.reference_time;
      v.timing_note = p.reference_time_note;
      if (p.reference_time && v.candidate_time->median_ms > 0) {
        v.speedup = p.reference_time->median_ms / v.candidate_time->median_ms;
        v.speedup_noise = speedup_noise(*v.candidate_time, *p.reference_time);
      }
      v.clock_note = window.note;
      if (window.throttled) {
        // As for KernelBench: a throttled measurement describes the GPU, not the kernel.
        v.timing_throttled = true;
        v.speedup.reset();
        v.speedup_noise.reset();
        v.timing_note = "speedup withheld: the GPU was throttled during the timed run (" +
                        window.note + ")" + (v.timing_note.empty() ? "" : "; " + v.timing_note);
      }
    }
    return finish(verdict_category::pass,
                  "Correct on all " + std::to_string(config_.trials) + " trials.");
  }

  // The run failed. Whether the GPU is at fault is the engine's probe's call, never the stream's:
  // the harness's report (or its stopping before the first call) only says when to ask.
  if (gpu_run && (!got.reached_solve || (got.failure && may_be_the_gpus(*got.failure)))) {
    // The keeper is the engine's: its failure, which only the judge reports, and its end, which
    // the engine sees itself, are the slot's. A keeper that failed is ended, to be started again.
    if (got.failure && got.failure->kind == harness_failure_kind::keeper) {
      // Memory the task's buffers could not get leaves the keeper usable (it goes on serving);
      // any other failure of it may have broken its context.
      if (!says_device_memory_exhausted(got.failure->name)) {
        drop_keeper(slot_gpu);
      }
      return infrastructure_error(gpu, "the slot's GPU keeper failed during the run (" +
                                           got.failure->name + " while " + got.failure->where +
                                           ": " + got.failure->text.substr(0, 300) + ")");
    }
    if (!keeper_alive(slot_gpu)) {
      return infrastructure_error(gpu, "the slot's GPU keeper ended during the run");
    }
    if (auto probe = probe_slot(task_kind::cuda, gpu); !probe) {
      std::string hint = got.failure ? "; the run had reported " + to_string(got.failure->kind) +
                                           " " + got.failure->name
                                     : "; the run stopped before its first call";
      return infrastructure_error(gpu, probe.err().message + hint.substr(0, 300));
    }
  }
  if (got.failure) {
    std::string text = harness_error_feedback(*got.failure, r->stderr_text);
    if (gpu_run && says_device_memory_exhausted(got.failure->name)) {
      v.device_memory_failure = true;
      if (sharing > 1) {
        // Nothing holds a cuda candidate's own cudaMalloc to it (CUDA has no per-process limit
        // outside MPS): the share is what it should have kept to, said so that it can.
        text += "\nIts run shared the GPU with " + std::to_string(sharing - 1) +
                " other run(s): its share of device memory was 1/" + std::to_string(sharing) +
                " of the GPU's memory less a reserve of " +
                std::to_string(config_.gpu_memory_reserve_bytes >> 20) + " MiB.";
      }
    }
    return finish(verdict_category::runtime, std::move(text));
  }
  if (!r->exited) {
    return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  }
  if (r->exit_code != 0) {
    return finish(verdict_category::runtime, exit_feedback(r->exit_code, r->stderr_text));
  }
  return finish(
      verdict_category::runtime,
      "Runtime error: the program exited (code 0) before the harness finished; do not call exit() "
      "or close standard streams in solve().");
}

}  // namespace leap::sandbox

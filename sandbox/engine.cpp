#include "sandbox/engine.hpp"

#include "sandbox/digits.hpp"
#include "sandbox/extract.hpp"
#include "sandbox/forbidden.hpp"
#include "sandbox/hash.hpp"

#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
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

// 32 hex digits: the harness's stream format takes 16 bytes.
std::string stream_nonce() {
  std::random_device rd;
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t w = rd();
    for (int j = 0; j < 8; ++j) out.push_back(digits[(w >> (4 * j)) & 0xF]);
  }
  return out;
}

constexpr std::string_view k_infrastructure_tag = "infrastructure failure on the run slot with ";

// CUDA errors that a healthy GPU does not give a candidate: worth asking the probe.
bool device_level_cuda_error(const std::string& name) {
  static const char* names[] = {"cudaErrorNoDevice",          "cudaErrorInsufficientDriver",
                                "cudaErrorInitializationError", "cudaErrorDevicesUnavailable",
                                "cudaErrorSystemNotReady",     "cudaErrorSystemDriverMismatch",
                                "cudaErrorECCUncorrectable",   "cudaErrorStartupFailure",
                                "cudaErrorInvalidDevice",      "cudaErrorUnknown",
                                "cudaErrorCompatNotSupportedOnDevice", "cudaErrorNotPermitted"};
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

const char* k_cuda_probe_source = R"(// The engine's own probe of a GPU slot: a known-good kernel and its known answer.
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

std::string compile_log(const run_result& r) {
  std::string log = r.stderr_text;
  if (!r.stdout_text.empty()) log += (log.empty() ? "" : "\n") + r.stdout_text;
  return log;
}

}  // namespace

std::string default_nvcc() { return LEAP_NVCC_DEFAULT; }

error infrastructure_error(int gpu, const std::string& what) {
  return error{std::string(k_infrastructure_tag) + (gpu >= 0 ? "GPU " + std::to_string(gpu) : std::string("no GPU")) +
               ": " + what};
}

std::optional<int> infrastructure_slot(const error& e) {
  if (e.message.rfind(k_infrastructure_tag, 0) != 0) return std::nullopt;
  const std::string rest = e.message.substr(k_infrastructure_tag.size());
  if (rest.rfind("no GPU:", 0) == 0) return -1;
  if (rest.rfind("GPU ", 0) != 0) return std::nullopt;
  std::size_t i = 4;
  int gpu = 0;
  bool digits = false;
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])) && gpu < 1000000) {
    gpu = gpu * 10 + (rest[i++] - '0');
    digits = true;
  }
  if (!digits || i >= rest.size() || rest[i] != ':') return std::nullopt;
  return gpu;
}

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
    const std::string nonce = stream_nonce();
    request.argv = {"./ref", std::to_string(t.seed), std::to_string(config_.trials), std::to_string(config_.timing_reps)};
    request.working_dir = dir->path();
    request.env = {{"PATH", base_path("")}, {"LANG", "C.UTF-8"}};
    request.stdin_data = nonce + "\n";
    request.limits = config_.run_limits;
    request.limits.wall *= 6;
    request.limits.cpu_seconds *= 6;
    request.limits.output_cap_bytes = k_max_artifact_bytes;  // the reference's stream, whole
    auto r = run_isolated(request);
    if (!r) return r.err().wrap(t.id + ": running the reference");
    if (!r->exited || r->exit_code != 0) {
      return error{t.id + ": the task's reference failed (" +
                   (r->timed_out ? std::string("timed out")
                    : r->exited  ? "exit code " + std::to_string(r->exit_code)
                                 : signal_name(r->signal)) +
                   "): " + r->stderr_text.substr(0, 1000)};
    }
    if (r->stdout_truncated) return error{t.id + ": the reference's output is larger than " + std::to_string(k_max_artifact_bytes) + " bytes"};
    auto dump = parse_dump(r->stdout_text, t, nonce);
    if (!dump) return dump.err().wrap(t.id + ": reference output");
    if (!dump->complete) return error{t.id + ": the reference's output is incomplete"};
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
  const std::string file = cuda ? "solution.cu" : "solution.cpp";
  // The code exactly as the model wrote it, so compiler line numbers and excerpts are its own.
  const std::string& source = p.code;
  std::vector<std::string> argv;
  if (cuda) {
    argv = {config_.nvcc};
    for (auto& f : split_flags(config_.nvcc_flags)) argv.push_back(f);
    argv.push_back(gencode_flag(config_.cuda_arch));
  } else {
    argv = {config_.cxx};
    for (auto& f : split_flags(config_.cxx_flags)) argv.push_back(f);
    argv.push_back("-pthread");
  }
  for (const char* a : {"", "harness.o", "-o", "cand"}) argv.emplace_back(*a ? a : file.c_str());
  std::string key_material = "candidate\n" + *identity + "\n";
  for (const auto& a : argv) key_material += a + "\n";
  key_material += sha256_hex(*object) + "\n" + source;
  auto lookup = cache_->get_or_build(sha256_hex(key_material), [&] {
    return build_in_sandbox({{file, source}, {"harness.o", *object}}, argv, "cand");
  });
  if (!lookup) return lookup.err();
  p.compile_ms = lookup->build_ms;
  p.cache_hit = lookup->hit || lookup->shared;
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

result<std::string> engine::cuda_probe_binary() {
  std::lock_guard lock(probe_mutex_);
  if (probe_binary_) return *probe_binary_;
  auto identity = compiler_identity(task_kind::cuda);
  if (!identity) return identity.err();
  std::vector<std::string> argv{config_.nvcc};
  for (auto& f : split_flags(config_.nvcc_flags)) argv.push_back(f);
  argv.push_back(gencode_flag(config_.cuda_arch));
  for (const char* a : {"probe.cu", "-o", "probe"}) argv.emplace_back(a);
  std::string key_material = "cuda-probe\n" + *identity + "\n";
  for (const auto& a : argv) key_material += a + "\n";
  key_material += k_cuda_probe_source;
  auto lookup = cache_->get_or_build(sha256_hex(key_material),
                                     [&] { return build_in_sandbox({{"probe.cu", k_cuda_probe_source}}, argv, "probe"); });
  if (!lookup) return lookup.err().wrap("building the CUDA probe");
  if (!lookup->output.ok) {
    return error{"the CUDA probe does not build" + std::string(lookup->output.timed_out ? " (timed out)" : "") + ": " +
                 lookup->output.log.substr(0, 1000)};
  }
  probe_binary_ = lookup->output.artifact;
  return *probe_binary_;
}

status engine::probe_slot(task_kind kind, int gpu) {
  if (config_.probe_override) return config_.probe_override(kind, gpu);
  if (kind != task_kind::cuda) return ok_status();
  auto binary = cuda_probe_binary();
  if (!binary) return binary.err();
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) return dir.err();
  if (auto s = write_file(dir->path() / "probe", *binary); !s) return s.err();
  ::chmod((dir->path() / "probe").c_str(), 0755);
  run_request request;
  request.argv = {"./probe"};
  request.working_dir = dir->path();
  request.env = run_env(gpu);
  request.limits = config_.cuda_run_limits;
  auto r = run_isolated(request);
  if (!r) return r.err().wrap("running the CUDA probe");
  if (r->exited && r->exit_code == 0 && r->stdout_text.find("LEAP_PROBE_OK") != std::string::npos) return ok_status();
  const std::string how = r->timed_out ? std::string("timed out")
                          : r->exited  ? "exit code " + std::to_string(r->exit_code)
                                       : "killed by " + signal_name(r->signal);
  std::string said = r->stderr_text.substr(0, 500);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  return error{"the engine's CUDA probe failed (" + how + ")" + (said.empty() ? "" : ": " + said)};
}

result<verdict> engine::run_native(const task& t, const prepared_candidate& p, int gpu) {
  const bool cuda = t.kind == task_kind::cuda;
  const int slot_gpu = cuda ? gpu : -1;
  auto dir = scratch_dir::create(config_.scratch_root, "run-");
  if (!dir) return infrastructure_error(slot_gpu, dir.err().message);
  if (auto s = write_file(dir->path() / "cand", p.binary); !s) return infrastructure_error(slot_gpu, s.err().message);
  ::chmod((dir->path() / "cand").c_str(), 0755);
  const harness_dump& expected = *p.expected;
  const std::string nonce = stream_nonce();
  run_request request;
  request.argv = {"./cand", std::to_string(t.seed), std::to_string(config_.trials), std::to_string(config_.timing_reps)};
  request.working_dir = dir->path();
  request.env = run_env(slot_gpu);
  request.stdin_data = nonce + "\n";
  request.limits = cuda ? config_.cuda_run_limits : config_.run_limits;
  // The whole stream must come back: the harness writes exactly as many bytes as the reference's
  // (same records, same counts) or an error record; anything beyond is the candidate's.
  request.limits.output_cap_bytes = std::max(request.limits.output_cap_bytes, expected.bytes + (64 << 10));
  auto r = run_isolated(request);
  if (!r) return infrastructure_error(slot_gpu, r.err().wrap("starting the candidate").message);

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  auto tampered = [&](const std::string& what) {
    return finish(verdict_category::runtime, "Runtime error: the harness's output was tampered with (" + what +
                                                 "); solve() must not write to file descriptors it did not open.");
  };
  if (r->timed_out) {
    return finish(verdict_category::timeout,
                  timeout_feedback(std::chrono::duration<double>(request.limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(request.limits.cpu_seconds, true));
  }
  if (r->stdout_truncated) return tampered(std::to_string(r->stdout_bytes) + " bytes where the harness writes at most " + std::to_string(expected.bytes));
  const std::vector<std::uint64_t>* counts = expected.trials.empty() ? nullptr : &expected.trials.front().counts;
  auto parsed = parse_dump(r->stdout_text, t, nonce, counts);
  if (!parsed) return tampered(parsed.err().message);
  harness_dump& got = parsed.value();

  if (got.complete && r->exited && r->exit_code == 0) {
    if (got.trials.size() != expected.trials.size() || got.extra.size() != expected.extra.size()) {
      return tampered("a run of " + std::to_string(got.trials.size() + got.extra.size()) + " calls, not " +
                      std::to_string(expected.trials.size() + expected.extra.size()));
    }
    // The inputs as the candidate left them against the reference's as generated: the engine's
    // own comparison, not a flag the harness reports.
    auto mark_inputs = [&](std::vector<trial_dump>& calls, const std::vector<trial_dump>& want) -> std::optional<std::string> {
      for (std::size_t c = 0; c < calls.size(); ++c) {
        if (calls[c].counts != want[c].counts || calls[c].input_hashes.size() != want[c].input_hashes.size()) {
          return "element counts of call " + std::to_string(c + 1);
        }
        std::size_t k = 0;
        for (const auto& a : t.args) {
          if (a.role != arg_role::input) continue;
          if (calls[c].input_hashes[k] != want[c].input_hashes[k]) calls[c].modified_inputs.push_back(a.name);
          ++k;
        }
      }
      return std::nullopt;
    };
    if (auto bad = mark_inputs(got.trials, expected.trials)) return tampered(*bad);
    if (auto bad = mark_inputs(got.extra, expected.extra)) return tampered(*bad);
    if (auto m = compare_dumps(t, expected, got)) return finish(verdict_category::wrong_answer, mismatch_feedback(*m));
    if (!got.extra.empty()) {
      // The warm-up and the timed repetitions get fresh inputs in the same buffers and are checked
      // like the trials: outputs cached by address or left from an earlier call fail here.
      harness_dump e_extra, g_extra;
      e_extra.trials = expected.extra;
      g_extra.trials = std::move(got.extra);
      if (auto m = compare_dumps(t, e_extra, g_extra)) {
        return finish(verdict_category::wrong_answer,
                      "In the timed runs (every call gets fresh inputs in the same buffers and is checked; \"trial\" "
                      "counts the timed calls): " +
                          mismatch_feedback(*m));
      }
    }
    if (!got.rep_ms.empty()) {
      v.candidate_time = stats_of(got.rep_ms);
      v.reference_time = p.reference_time;
      if (p.reference_time && v.candidate_time->median_ms > 0) {
        v.speedup = p.reference_time->median_ms / v.candidate_time->median_ms;
      }
    }
    return finish(verdict_category::pass, "Correct on all " + std::to_string(config_.trials) + " trials.");
  }

  // The run failed. Whether the GPU is at fault is the engine's probe's call, never the stream's:
  // the harness's report (or its stopping before the first call) only says when to ask.
  if (cuda && (!got.reached_solve || (got.failure && (got.failure->kind == "cuda_init" ||
                                                      device_level_cuda_error(got.failure->name))))) {
    if (auto probe = probe_slot(task_kind::cuda, gpu); !probe) {
      std::string hint = got.failure ? "; the run had reported " + got.failure->kind + " " + got.failure->name
                                     : "; the run stopped before its first call";
      return infrastructure_error(gpu, probe.err().message + hint.substr(0, 300));
    }
  }
  if (got.failure) {
    const harness_failure& f = *got.failure;
    return finish(verdict_category::runtime, harness_error_feedback(harness_error{f.kind, f.name, f.where, f.text}, r->stderr_text));
  }
  if (!r->exited) return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  if (r->exit_code != 0) return finish(verdict_category::runtime, exit_feedback(r->exit_code, r->stderr_text));
  return finish(verdict_category::runtime,
                "Runtime error: the program exited (code 0) before the harness finished; do not call exit() "
                "or close standard streams in solve().");
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

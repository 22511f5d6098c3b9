// The engine's steps every pipeline shares: its creation, the compilers' identities, compile()'s
// and run()'s dispatch over the pipelines (kinds.hpp), the slot's probe, the run's environment and
// the infrastructure errors. The pipelines: engine_native.cpp (cpp and cuda), engine_python.cpp,
// engine_kernelbench.cpp; the profiling run: engine_profile.cpp.
#include "sandbox/engine.hpp"

#include "sandbox/digits.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/extract.hpp"
#include "sandbox/forbidden.hpp"
#include "sandbox/kinds.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <future>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#ifndef LEAP_NVCC_DEFAULT
#define LEAP_NVCC_DEFAULT "nvcc"
#endif

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace {

using detail::base_path;
using detail::compiler_probe;
using detail::make_verdict;

constexpr std::string_view k_infrastructure_tag = "infrastructure failure on the run slot with ";

// The checks on the answer's text that every extracted kind shares: the kind's fenced block
// (a `format` verdict otherwise) and the forbidden-use pre-check (a `forbidden` verdict). Fills
// p.code; returns whether the candidate passed both.
bool extract_and_check(const task& t, std::string_view answer, prepared_candidate& p) {
  auto extracted = extract_code(answer, t.kind);
  if (!extracted) {
    p.final_verdict = make_verdict(verdict_category::format, extracted.err().message);
    return false;
  }
  p.code = extracted->code;
  if (auto hit = find_forbidden(p.code, t.kind, t.forbidden)) {
    p.final_verdict = make_verdict(verdict_category::forbidden, hit->reason);
    return false;
  }
  return true;
}

}  // namespace

std::string default_nvcc() { return LEAP_NVCC_DEFAULT; }

bool says_device_memory_exhausted(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // CUDA's libraries say it their own way when their workspace or handle cannot be allocated
  // (CUBLAS_STATUS_ALLOC_FAILED from torch's first matmul on a full GPU, cuDNN's, cuFFT's).
  for (const std::string_view sign :
       {"out of memory", "outofmemoryerror", "cudaerrormemoryallocation",
        "cuda_error_out_of_memory", "_alloc_failed"}) {
    if (lower.find(sign) != std::string::npos) {
      return true;
    }
  }
  return false;
}

error infrastructure_error(int gpu, const std::string& what) {
  return error{std::string(k_infrastructure_tag) +
               (gpu >= 0 ? "GPU " + std::to_string(gpu) : std::string("no GPU")) + ": " + what};
}

std::optional<int> infrastructure_slot(const error& e) {
  if (e.message.rfind(k_infrastructure_tag, 0) != 0) {
    return std::nullopt;
  }
  const std::string rest = e.message.substr(k_infrastructure_tag.size());
  if (rest.rfind("no GPU:", 0) == 0) {
    return -1;
  }
  if (rest.rfind("GPU ", 0) != 0) {
    return std::nullopt;
  }
  std::size_t i = 4;
  int gpu = 0;
  bool digits = false;
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])) && gpu < 1000000) {
    gpu = gpu * 10 + (rest[i++] - '0');
    digits = true;
  }
  if (!digits || i >= rest.size() || rest[i] != ':') {
    return std::nullopt;
  }
  return gpu;
}

std::vector<std::string> split_flags(const std::string& flags) {
  std::istringstream ss(flags);
  std::vector<std::string> out;
  std::string w;
  while (ss >> w) {
    out.push_back(w);
  }
  return out;
}

engine::engine(engine_config config) : config_(std::move(config)) {}

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
  // Absolute: the builds are given paths into it (torch's precompiled header), and a sandboxed
  // build's working folder is its own.
  std::error_code ec;
  config.cache_dir = fs::absolute(config.cache_dir, ec);
  if (ec) {
    return error{"engine_config.cache_dir: " + ec.message()};
  }
  if (config.trials < 1) {
    return error{"engine_config.trials must be at least 1"};
  }
  if (config.timing_reps < 0) {
    return error{"engine_config.timing_reps must not be negative"};
  }
  auto cache = compile_cache::open(config.cache_dir, config.cache_max_bytes);
  if (!cache) {
    return cache.err();
  }
  std::unique_ptr<engine> e(new engine(std::move(config)));
  e->cache_ = std::move(cache.value());
  e->readonly_paths_ = detail::toolchain_prefixes(e->config_);
  if (e->config_.kernelbench_pch_ahead) {
    e->prepare_kernelbench();
  }
  return e;
}

result<std::string> engine::compiler_identity(task_kind kind) {
  // One probe at a time: the first caller runs it, the others find its answer.
  std::lock_guard probe_lock(identity_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = compiler_ids_.find(kind); it != compiler_ids_.end()) {
      return it->second;
    }
  }
  std::string identity;
  for (const auto& tool : detail::toolchain_programs(config_, traits_of(kind).compiler)) {
    const std::vector<std::string> argv{tool.program, "--version"};
    auto dir = scratch_dir::create(config_.scratch_root, "probe-");
    if (!dir) {
      return dir.err();
    }
    auto r = run_isolated(compiler_probe(config_, readonly_paths_, dir->path(), argv));
    if (!r) {
      return r.err().wrap("finding the compiler for " + std::string(to_string(kind)) + " tasks");
    }
    if (!r->exited || r->exit_code != 0) {
      return error{"'" + argv.front() + " --version' failed (" + detail::how_it_ended(*r) +
                   "): " + r->stderr_text.substr(0, 300)};
    }
    identity += r->stdout_text + r->stderr_text;
  }
  std::lock_guard lock(mutex_);
  compiler_ids_[kind] = identity;
  return identity;
}

result<prepared_candidate> engine::compile(const task& t, std::string_view answer,
                                           bool with_reference) {
  prepared_candidate p;
  switch (traits_of(t.kind).judged_by) {
    case pipeline::text:
      // Judged on the text itself: nothing to extract, compile or run.
      p.code = std::string(answer);
      p.final_verdict = judge_digit_sum(t.target, answer);
      return p;
    case pipeline::python_tests:
      // Run from source by the run stage.
      extract_and_check(t, answer, p);
      return p;
    case pipeline::kernelbench:
      // Run from source by the run stage, with the extensions it builds at import built here.
      if (extract_and_check(t, answer, p) && config_.kernelbench_prebuild) {
        if (auto s = prebuild_kernelbench(t, p); !s) {
          return s.err();
        }
      }
      return p;
    case pipeline::native:
      if (!extract_and_check(t, answer, p)) {
        return p;
      }
      break;
  }
  return compile_native(t, std::move(p), with_reference);
}

std::vector<std::pair<std::string, std::string>> engine::run_env(int gpu) const {
  std::vector<std::pair<std::string, std::string>> env{{"PATH", base_path("")},
                                                       {"LANG", "C.UTF-8"},
                                                       {"OMP_NUM_THREADS", "1"},
                                                       {"PYTHONHASHSEED", "0"}};
  if (gpu >= 0) {
    // The slot's GPU as nvidia-smi and NVML number it (PCI bus order), which is how the engine
    // reads its clocks (gpu_clocks.hpp); CUDA's default order puts the fastest first.
    env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu));
  }
  return env;
}

status engine::probe_slot(task_kind kind, int gpu) {
  if (config_.probe_override) {
    return config_.probe_override(kind, gpu);
  }
  switch (traits_of(kind).judged_by) {
    case pipeline::text:
      return ok_status();
    case pipeline::python_tests:
      return probe_python();
    case pipeline::kernelbench: {
      auto device = kernelbench_device(gpu);
      if (!device) {
        return device.err();
      }
      return ok_status();
    }
    case pipeline::native:
      break;
  }
  return probe_native_slot(kind, gpu);
}

result<verdict> engine::run(const task& t, const prepared_candidate& prepared, int gpu,
                            int sharing) {
  auto v = judge(t, prepared, gpu, sharing);
  if (v && !prepared.final_verdict && profile_selects(config_.profile, t.kind, *v)) {
    // On the slot that ran it, so that no other candidate's timed run shares the GPU with ncu's
    // replays; bounded by profile_limits.
    profile_candidate(t, prepared, *v, gpu);
  }
  return v;
}

result<verdict> engine::judge(const task& t, const prepared_candidate& prepared, int gpu,
                              int sharing) {
  if (prepared.final_verdict) {
    return *prepared.final_verdict;
  }
  result<verdict> v = error{t.id + ": no verdict"};
  switch (traits_of(t.kind).judged_by) {
    case pipeline::text:
      // compile() judged it: a prepared text candidate always holds its verdict.
      return error{t.id + ": run() of a candidate that compile() did not prepare"};
    case pipeline::python_tests:
      v = run_python(t, prepared);
      break;
    case pipeline::kernelbench:
      v = run_kernelbench(t, prepared, gpu, sharing);
      break;
    case pipeline::native:
      if (prepared.expected == nullptr) {
        return error{t.id + ": run() of a candidate compiled without its reference"};
      }
      v = run_native(t, prepared, gpu, sharing);
      break;
  }
  if (!v) {
    return v;
  }
  v->compile_ms = prepared.compile_ms;
  v->cache_hit = prepared.cache_hit;
  return v;
}

result<verdict> engine::verify(const task& t, std::string_view answer, int gpu) {
  // The slot's start does not depend on the candidate; its errors come again from run(), which
  // meets the same probe and reference (ready_kernelbench_slot says why).
  std::future<status> slot_ready;
  if (traits_of(t.kind).judged_by == pipeline::kernelbench) {
    slot_ready = std::async(std::launch::async, [&] { return ready_kernelbench_slot(t, gpu); });
  }
  auto prepared = compile(t, answer);
  std::optional<status> ready;
  if (slot_ready.valid()) {
    ready = slot_ready.get();
  }
  if (!prepared) {
    return prepared.err();
  }
  auto v = run(t, *prepared, gpu);
  if (v && ready && !ready->ok()) {
    v->diagnostics += "\nthe run slot was not readied beside the build: " + ready->err().message;
  }
  return v;
}

}  // namespace leap::sandbox

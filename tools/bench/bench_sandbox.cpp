// Sandbox throughput benchmark (not a test): for N candidates of one task kind, the cold compile
// latency, the cache-hit latency, and verifications per second by worker count, cold (every
// candidate compiles) and warm (every candidate is a cache hit). Prints a table.
//
//   bench_sandbox [--kind cpp|cuda|python|kernelbench] [--candidates N] [--workers 1,2,4] [--task
//   DIR] [--gpu N] [--python PYTHON] [--extension] [--no-throughput]
//
// --extension (kernelbench): the candidate builds its own CUDA kernel with load_inline at import,
// as KernelBench's candidates do; the first verification (empty caches) then includes the build.
// --cpu-extension: the same with a C++ extension on the CPU (torch without CUDA). Either first
// prints the extension section: with torch's headers precompiled and without (engines of their
// own, empty caches), the first verification, a new request once the header exists, another
// source with the same request (the recorder runs, the library is a cache hit) and that same
// source again (its recording reused), each with its compile/run split and build note.
//
// Candidates are the task's solution made distinct by a comment, so each has its own cache key.
// Without --task a built-in task of the kind is used. cuda runs need a GPU; without one the cuda
// bench measures the compile side only.
#include "sandbox/kinds.hpp"
#include "sandbox/verifier.hpp"
#include "tools/bench/bench_main.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using namespace leap::sandbox;
using leap::parse_task_kind;
using leap::task_kind;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A KernelBench candidate with its own CUDA kernel built by load_inline at import (the same for
// every candidate but for a comment, so after the first build the extension may come from a cache).
const char* k_extension_solution = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = """
#include <torch/extension.h>
__global__ void scale_add_kernel(const float* a, const float* b, float* out, float s, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * s + b[i];
}
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) {
  auto out = torch::empty_like(a);
  long n = a.numel();
  scale_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                             out.data_ptr<float>(), (float)s, n);
  return out;
}
"""
_ext = load_inline(name="bench_scale_add", cpp_sources="torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s);",
                   cuda_sources=_cuda, functions=["scale_add"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return _ext.scale_add(a.contiguous(), b.contiguous(), self.scale)
)PY";

// The same on the CPU (Debian's torch has no CUDA): a C++ extension through load_inline, g++ only.
// @TAG@ marks where the extension section makes the request itself distinct.
const char* k_cpu_extension_solution = R"PY(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cpp = """
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) { return a * s + b; }  // @TAG@
"""
_ext = load_inline(name="bench_scale_add_cpu", cpp_sources=_cpp, functions=["scale_add"],
                   extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return _ext.scale_add(a.contiguous(), b.contiguous(), self.scale)
)PY";

// Sets engine_config::kernelbench_pch where the tree has it (tools/gpu/check.sh builds this file in
// an older tree too, where the header is never precompiled).
template <typename C>
bool set_pch(C& c, bool on) {
  if constexpr (requires { c.kernelbench_pch; }) {
    c.kernelbench_pch = on;
    return true;
  }
  return false;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

task builtin_task(task_kind kind) {
  task t;
  t.kind = kind;
  if (kind == task_kind::python) {
    t.id = "python/bench_add";
    t.tests = "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n";
    t.solution = "def add(a, b):\n    return a + b\n";
    return t;
  }
  if (kind == task_kind::kernelbench) {
    // PyTorch ops only, so that it passes wherever torch runs (own_kernel off): what is measured
    // is the harness around the call (two Python processes, torch imported, inputs and outputs
    // shared), not a kernel build.
    t.id = "kernelbench/bench_scale_add";
    t.own_kernel = own_kernel_policy::off;
    t.reference =
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, "
        "scale):\n        super().__init__()\n        self.scale = scale\n\n    def forward(self, "
        "a, b):\n        return a * self.scale + b\n\ndef get_inputs():\n    return "
        "[torch.randn(1024, 1024), torch.randn(1024, 1024)]\n\ndef get_init_inputs():\n    "
        "return [3.0]\n";
    t.solution =
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def "
        "__init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n    "
        "def forward(self, a, b):\n        return torch.addcmul(b, a, "
        "torch.tensor(self.scale, device=a.device))\n";
    return t;
  }
  t.id = kind == task_kind::cuda ? "cuda/bench_scale" : "cpp/bench_scale";
  t.args = {{"x", value_type::f32, arg_role::input, "n", -1, 1, 0},
            {"y", value_type::f32, arg_role::output, "n", 0, 0, 0},
            {"n", value_type::i32, arg_role::scalar, "", 0, 0, 1 << 16}};
  t.reference =
      "void reference(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 2.0f * "
      "x[i]; }\n";
  if (kind == task_kind::cuda) {
    t.forbidden = default_forbidden(kind);
    t.solution =
        "__global__ void k(const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n"
        "  if (i < n) y[i] = 2.0f * x[i];\n}\nvoid solve(const float* x, float* y, int n) { k<<<(n "
        "+ 255) / 256, 256>>>(x, y, n); }\n";
  } else {
    t.solution =
        "void solve(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 2.0f * "
        "x[i]; }\n";
  }
  return t;
}

std::string answer(const task& t, int index, const std::string& salt) {
  const auto& kind = leap::sandbox::traits_of(t.kind);
  const std::string comment = (kind.hash_comments ? "# " : "// ") + std::string("candidate ") +
                              salt + "-" + std::to_string(index) + "\n";
  return "```" + std::string(kind.fence) + "\n" + comment + t.solution + "```\n";
}

int parse_and_run(int argc, char** argv) {
  // Line-buffered even into a pipe, so a run cut short still shows the rows it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string kind_name = "cpp";
  int n = 16;
  std::vector<int> workers{1, 2, 4};
  std::string task_dir;
  std::string python;
  int gpu = -1;
  bool extension = false;
  bool cpu_extension = false;
  bool throughput = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_sandbox: error: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--kind") {
      kind_name = next();
    } else if (a == "--candidates") {
      n = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--workers") {
      workers.clear();
      std::stringstream ss(next());
      std::string w;
      while (std::getline(ss, w, ',')) {
        workers.push_back(std::max(1, std::atoi(w.c_str())));
      }
    } else if (a == "--task") {
      task_dir = next();
    } else if (a == "--gpu") {
      gpu = std::atoi(next().c_str());
    } else if (a == "--python") {
      python = next();
    } else if (a == "--extension") {
      extension = true;
    } else if (a == "--cpu-extension") {
      extension = true;
      cpu_extension = true;
    } else if (a == "--no-throughput") {
      throughput = false;
    } else {
      std::fprintf(
          stderr,
          "usage: bench_sandbox [--kind cpp|cuda|python|kernelbench] [--candidates N] [--workers "
          "1,2,4] [--task DIR] [--gpu N] [--python PYTHON (python and kernelbench kinds)] "
          "[--extension (kernelbench: a load_inline CUDA candidate)] [--cpu-extension (the same, a "
          "C++ "
          "extension on the CPU)] [--no-throughput]\n");
      return a == "--help" ? 0 : 1;
    }
  }
  auto kind = parse_task_kind(kind_name);
  if (!kind) {
    std::fprintf(stderr, "bench_sandbox: error: %s\n", kind.err().message.c_str());
    return 1;
  }
  task t = builtin_task(*kind);
  if (extension && t.kind == task_kind::kernelbench) {
    t.id = "kernelbench/bench_scale_add_extension";
    t.solution = cpu_extension ? k_cpu_extension_solution : k_extension_solution;
  }
  if (!task_dir.empty()) {
    auto loaded = load_task_dir(task_dir);
    if (!loaded) {
      std::fprintf(stderr, "bench_sandbox: error: %s\n", loaded.err().message.c_str());
      return 1;
    }
    t = loaded.value();
  }
  const bool has_gpu = fs::exists("/dev/nvidia0");
  const bool compile_only = t.kind == task_kind::cuda && !has_gpu;
  // Outside /tmp: the sandbox shows a build the compile cache's precompiled header only from there.
  const char* home = std::getenv("HOME");
  const fs::path cache_root =
      (home != nullptr && *home != '\0' ? fs::path(home) / ".cache"
                                        : default_scratch_root().parent_path()) /
      ("leap-bench-cache-" + std::to_string(::getpid()));
  const std::string salt = std::to_string(::getpid());
  auto fresh_config = [&](const std::string& name) {
    engine_config c;
    c.cache_dir = cache_root / name;
    if (!python.empty()) {
      c.python = python;
    }
    if (cpu_extension) {
      c.kernelbench_device = "cpu";
    }
    return c;
  };

  std::printf("sandbox benchmark: task %s (%s), %d candidates, isolation: %s%s\n", t.id.c_str(),
              to_string(t.kind).c_str(), n, isolation_summary().c_str(),
              compile_only ? ", no GPU: compile side only" : "");

  if (extension && t.kind == task_kind::kernelbench) {
    std::printf("\n%-44s %10s %10s %10s  %s\n", "extension verify (ms)", "wall", "compile", "run",
                "build note");
    for (const bool pch : {false, true}) {
      engine_config c = fresh_config(pch ? "ext-pch" : "ext-plain");
      if (!set_pch(c, pch) && pch) {
        std::printf("(this tree has no precompiled header: its second pass is the first again)\n");
      }
      auto x = engine::create(c);
      if (!x) {
        std::fprintf(stderr, "bench_sandbox: error: %s\n", x.err().message.c_str());
        return 1;
      }
      const std::string mode = pch ? "headers precompiled" : "plain";
      auto text = [&](const std::string& request_tag, int index) {
        task u = t;
        u.solution = replace_all(t.solution, "@TAG@", salt + "-" + mode + "-" + request_tag);
        return answer(u, index, salt + mode);
      };
      const std::vector<std::pair<std::string, std::string>> steps{
          {"first verify (empty caches)", text("r1", 1)},
          {"a new request (header built)", text("r2", 1)},
          {"same request, other source", text("r2", 2)},
          {"that same source again", text("r2", 2)}};
      for (const auto& [what, candidate_text] : steps) {
        const auto start = clock_type::now();
        auto v = (*x)->verify(t, candidate_text);
        const double wall = ms_since(start);
        if (!v || !v->passed) {
          std::fprintf(stderr, "bench_sandbox: error: the extension candidate did not pass: %s\n",
                       v ? (v->feedback + "\n" + v->diagnostics).c_str() : v.err().message.c_str());
          return 1;
        }
        std::printf("%-44s %10.0f %10.0f %10.0f  %s\n", (mode + ": " + what).c_str(), wall,
                    v->compile_ms, v->run_ms, v->build_note.c_str());
      }
    }
  }

  // Latency: one engine, candidates one at a time.
  auto e = engine::create(fresh_config("latency"));
  if (!e) {
    std::fprintf(stderr, "bench_sandbox: error: %s\n", e.err().message.c_str());
    return 1;
  }
  std::vector<double> first;
  {
    // The task's harness and reference are built once per task; not part of a candidate's latency.
    const auto start = clock_type::now();
    auto warm = (*e)->compile(t, answer(t, -1, salt));
    if (!warm) {
      std::fprintf(stderr, "bench_sandbox: error: %s\n", warm.err().message.c_str());
      return 1;
    }
    // KernelBench's reference outputs are computed at the first run of the task, then cached.
    if (t.kind == task_kind::kernelbench) {
      auto v = (*e)->run(t, *warm, gpu);
      if (!v || !v->passed) {
        std::fprintf(stderr, "bench_sandbox: error: the warm-up run failed: %s\n",
                     v ? v->feedback.c_str() : v.err().message.c_str());
        return 1;
      }
      first.push_back(ms_since(start));
      std::printf("first verify: compile %.0f ms, run %.0f ms\n", v->compile_ms, v->run_ms);
    }
  }
  std::vector<double> cold, hit, verify_cold;
  for (int i = 0; i < n; ++i) {
    const auto start = clock_type::now();
    auto p = (*e)->compile(t, answer(t, i, salt));
    cold.push_back(ms_since(start));
    if (!p) {
      std::fprintf(stderr, "bench_sandbox: error: %s\n", p.err().message.c_str());
      return 1;
    }
    if (!compile_only) {
      const auto run_start = clock_type::now();
      auto v = (*e)->run(t, *p, gpu);
      verify_cold.push_back(cold.back() + ms_since(run_start));
      if (!v || !v->passed) {
        std::fprintf(stderr, "bench_sandbox: error: the solution did not pass: %s\n",
                     v ? v->feedback.c_str() : v.err().message.c_str());
        return 1;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    const auto start = clock_type::now();
    auto p = (*e)->compile(t, answer(t, i, salt));
    hit.push_back(ms_since(start));
  }
  std::printf("\n%-34s %10s %10s %10s\n", "latency (ms)", "median", "min", "max");
  auto row = [](const char* name, const std::vector<double>& v) {
    if (v.empty()) {
      return;
    }
    std::printf("%-34s %10.1f %10.1f %10.1f\n", name, median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  row(t.kind == task_kind::python ? "prepare (extract+check)" : "cold compile", cold);
  row("cache-hit compile stage", hit);
  row("cold verify (compile + run)", verify_cold);
  row("first verify (empty caches)", first);

  if (!compile_only && throughput) {
    std::printf("\n%-10s %22s %22s\n", "workers", "cold verifications/s", "warm verifications/s");
    for (int w : workers) {
      verifier_config vc;
      vc.engine = fresh_config("throughput-" + std::to_string(w));
      vc.compile_workers = w;
      vc.run_slots = w;
      if ((t.kind == task_kind::cuda || t.kind == task_kind::kernelbench) && gpu >= 0) {
        vc.gpus = {gpu};
      }
      auto v = verifier::create(vc);
      if (!v) {
        std::fprintf(stderr, "bench_sandbox: error: %s\n", v.err().message.c_str());
        return 1;
      }
      auto batch = [&](const std::string& tag) {
        auto shared = std::make_shared<const task>(t);
        const auto start = clock_type::now();
        std::vector<std::future<leap::result<verdict>>> futures;
        futures.reserve(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) {
          futures.push_back((*v)->submit(shared, answer(t, i, salt + tag)));
        }
        int ok = 0;
        std::string first_failure;
        for (auto& f : futures) {
          auto r = f.get();
          const bool passed = r.ok() && r->passed;
          ok += passed;
          if (!passed && first_failure.empty()) {
            first_failure = r.ok() ? r->feedback : r.err().message;
          }
        }
        const double s = ms_since(start) / 1000.0;
        if (ok != n) {
          std::fprintf(stderr, "warning: %d of %d candidates did not pass; the first: %s\n", n - ok,
                       n, first_failure.c_str());
        }
        return n / s;
      };
      (void)(*v)->verification_engine().compile(
          t, answer(t, -2, salt));  // per-task harness and reference
      const double cold_rate = batch("w" + std::to_string(w));
      const double warm_rate = batch("w" + std::to_string(w));  // same candidates again: cache hits
      std::printf("%-10d %22.2f %22.2f\n", w, cold_rate, warm_rate);
    }
  }
  std::error_code ec;
  fs::remove_all(cache_root, ec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return leap::bench::main_of("bench_sandbox", parse_and_run, argc, argv);
}

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
// --batch DIR (issue 30): DIR/batch.txt lists KernelBench problems and candidates (their class,
// expected verdict, copies and distinct variants; tools/bench/kernelbench_batch/gpu holds 64 over 4
// problems, .../cpu a set for torch without CUDA, run with --cpu). All are submitted at once (or at
// most --in-flight K at a time, none after --max-seconds S) to one verifier with --workers W
// compile workers (default 16) and --run-slots N run slots (default 1) on --gpu N; it prints
// progress every 10 s, then the verdicts per class, the wall time and verifications per minute, the
// run slots' busy fraction and the time a slot was free while a compiled candidate waited
// (verifier::load() sampled every 20 ms, and the same from the verdicts' run_ms and run_queue_ms),
// and exits 1 when a verdict is not the expected one (a table of those). --build-in-run: extensions
// are built in the run, as before issue 30 (where the tree has
// engine_config::kernelbench_prebuild). Torch's precompiled header is built ahead, outside the wall
// (--no-pch-ahead: by the first builds).
//
// Candidates are the task's solution made distinct by a comment, so each has its own cache key.
// Without --task a built-in task of the kind is used. cuda runs need a GPU; without one the cuda
// bench measures the compile side only.
#include "sandbox/kinds.hpp"
#include "sandbox/verifier.hpp"
#include "tools/bench/bench_main.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
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

// Outside /tmp: the sandbox shows a build the compile cache's precompiled header only from there.
// One per process, so that every run starts from empty caches.
fs::path bench_cache_root() {
  const char* home = std::getenv("HOME");
  return (home != nullptr && *home != '\0' ? fs::path(home) / ".cache"
                                           : default_scratch_root().parent_path()) /
         ("leap-bench-cache-" + std::to_string(::getpid()));
}

// --- The batch mode (--batch DIR): a group of KernelBench candidates through one verifier.

// One line of DIR/batch.txt: `copies` submissions of a candidate file, with @V@ replaced by
// copy % distinct (copies of one variant repeat exactly; variants differ, so each is its own
// build).
struct batch_line {
  fs::path problem;
  fs::path candidate;
  std::string klass;     // cuda, triton, torch, cpp, wrong, crash: what the table groups by
  std::string expected;  // a verdict category's name
  int copies = 1;
  int distinct = 1;
};

leap::result<std::vector<batch_line>> read_batch(const fs::path& dir) {
  const fs::path file = dir / "batch.txt";
  std::ifstream in(file);
  if (!in) {
    return leap::error{"cannot read " + file.string()};
  }
  std::vector<batch_line> lines;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos || text[first] == '#') {
      continue;
    }
    std::istringstream words(text);
    std::string problem, candidate;
    batch_line l;
    if (!(words >> problem >> candidate >> l.klass >> l.expected >> l.copies >> l.distinct) ||
        l.copies < 1 || l.distinct < 1) {
      return leap::error{file.string() + ":" + std::to_string(number) +
                         ": expected: problem candidate class expected copies distinct"};
    }
    if (!leap::parse_verdict_category(l.expected)) {
      return leap::error{file.string() + ":" + std::to_string(number) + ": '" + l.expected +
                         "' is not a verdict category"};
    }
    l.problem = dir / problem;
    l.candidate = dir / candidate;
    lines.push_back(std::move(l));
  }
  if (lines.empty()) {
    return leap::error{file.string() + ": no candidates"};
  }
  return lines;
}

struct batch_item {
  std::string label;   // candidate file, copy and variant
  std::string source;  // problem and candidate file: the line it came from
  std::string klass;
  std::string expected;
  std::shared_ptr<const task> t;
  std::string answer;
};

leap::result<std::string> read_file_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return leap::error{"cannot read " + file.string()};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The submissions in a seeded random order (the same in every build of this file: its own
// generator and Fisher-Yates), so that a prefix of the batch, which is what a run cut short by
// --max-seconds verifies, is a sample of every class; at most `limit` (0: all).
leap::result<std::vector<batch_item>> batch_items(const std::vector<batch_line>& lines,
                                                  std::size_t limit, std::uint64_t seed) {
  std::map<fs::path, std::shared_ptr<const task>> tasks;
  std::vector<batch_item> items;
  for (const auto& l : lines) {
    if (!tasks.contains(l.problem)) {
      auto t = load_kernelbench_file(l.problem, l.problem.parent_path().filename().string());
      if (!t) {
        return t.err();
      }
      tasks[l.problem] = std::make_shared<const task>(std::move(t.value()));
    }
    auto text = read_file_text(l.candidate);
    if (!text) {
      return text.err();
    }
    for (int copy = 0; copy < l.copies; ++copy) {
      const std::string variant = std::to_string(copy % l.distinct);
      batch_item b;
      b.label = l.problem.stem().string() + "/" + l.candidate.filename().string() + " v" + variant +
                " #" + std::to_string(copy);
      b.source = l.problem.stem().string() + "/" + l.candidate.filename().string();
      b.klass = l.klass;
      b.expected = l.expected;
      b.t = tasks[l.problem];
      b.answer = "```python\n" + replace_all(*text, "@V@", variant) + "```\n";
      items.push_back(std::move(b));
    }
  }
  std::uint64_t state = seed;
  auto next = [&state] {  // SplitMix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  };
  for (std::size_t i = items.size(); i > 1; --i) {
    std::swap(items[i - 1], items[next() % i]);
  }
  if (limit > 0 && items.size() > limit) {
    items.resize(limit);
  }
  return items;
}

// Sets engine_config::kernelbench_prebuild where the tree has it (off: every extension is built in
// the run, as before builds left the GPU slot).
template <typename C>
bool set_prebuild(C& c, bool on) {
  if constexpr (requires { c.kernelbench_prebuild; }) {
    c.kernelbench_prebuild = on;
    return true;
  }
  return false;
}

// Builds torch's precompiled header ahead where the tree can (a verifier node does so before it
// takes work); returns the seconds it took, or -1 where the tree has no such step.
template <typename E>
double prepare_ahead(E& e) {
  if constexpr (requires { e.kernelbench_prepared(); }) {
    const auto start = clock_type::now();
    auto ready = e.kernelbench_prepared(
        [](int seconds) { std::printf("  building torch's precompiled header: %d s\n", seconds); });
    if (!ready) {
      std::printf("  no precompiled header (%s): builds go on without it\n",
                  ready.err().message.c_str());
    }
    return ms_since(start) / 1000.0;
  }
  return -1;
}

template <typename V>
std::string build_note_of(const V& v) {
  if constexpr (requires { v.build_note; }) {
    return v.build_note;
  }
  return "";
}

// Time a run slot sat free while a compiled candidate waited, and the slots' busy time, from
// intervals: events (time, change in running jobs, change in waiting jobs), swept in time order.
struct slot_view {
  double busy_slot_s = 0;  // integral of min(running, slots) / slots
  double idle_waiting_s = 0;
};

slot_view sweep(std::vector<std::tuple<double, int, int>> events, int slots) {
  std::sort(events.begin(), events.end());
  slot_view s;
  int running = 0;
  int waiting = 0;
  double last = events.empty() ? 0 : std::get<0>(events.front());
  for (const auto& [at, d_run, d_wait] : events) {
    const double dt = at - last;
    s.busy_slot_s += dt * std::min(running, slots) / slots;
    if (waiting > 0 && running < slots) {
      s.idle_waiting_s += dt;
    }
    running += d_run;
    waiting += d_wait;
    last = at;
  }
  return s;
}

struct batch_options {
  fs::path dir;
  std::size_t limit = 0;
  int compile_workers = 16;
  int run_slots = 1;
  int gpu = -1;
  bool cpu = false;
  bool build_in_run = false;
  bool pch_ahead = true;
  std::uint64_t seed = 1;
  // At most this many candidates accepted and not yet judged (0: the whole batch at once). A tree
  // whose compile stage is only extraction keeps its run slot as busy with run_slots + 1.
  int in_flight = 0;
  // No submission after this many seconds (0: none): the candidates in flight finish, the rest are
  // not verified, and the rate is over what finished.
  double max_seconds = 0;
};

int run_batch(const batch_options& o,
              const std::function<engine_config(const std::string&)>& fresh) {
  auto lines = read_batch(o.dir);
  if (!lines) {
    std::fprintf(stderr, "bench_sandbox: error: %s\n", lines.err().message.c_str());
    return 1;
  }
  auto items = batch_items(*lines, o.limit, o.seed);
  if (!items) {
    std::fprintf(stderr, "bench_sandbox: error: %s\n", items.err().message.c_str());
    return 1;
  }
  const int n = static_cast<int>(items->size());
  verifier_config vc;
  vc.engine = fresh("batch");
  if (o.cpu) {
    vc.engine.kernelbench_device = "cpu";
  }
  if (o.build_in_run && !set_prebuild(vc.engine, false)) {
    std::printf("(this tree has no kernelbench_prebuild: it always builds in the run)\n");
  }
  vc.compile_workers = o.compile_workers;
  vc.run_slots = o.run_slots;
  if (o.gpu >= 0) {
    vc.gpus = {o.gpu};
  }
  vc.queue_capacity = std::max<std::size_t>(64, items->size());
  auto v = verifier::create(vc);
  if (!v) {
    std::fprintf(stderr, "bench_sandbox: error: %s\n", v.err().message.c_str());
    return 1;
  }
  std::printf("kernelbench batch: %d candidates from %s, %d compile workers, %d run slot(s)%s%s\n",
              n, o.dir.string().c_str(), (*v)->compile_workers(), (*v)->run_slots(),
              o.gpu >= 0 ? (" on GPU " + std::to_string(o.gpu)).c_str() : "",
              o.build_in_run ? ", extensions built in the run" : "");
  if (o.pch_ahead && !o.build_in_run) {
    const double s = prepare_ahead((*v)->verification_engine());
    if (s >= 0) {
      std::printf("torch's precompiled header built ahead: %.1f s (before the wall below)\n", s);
    }
  }

  struct record {
    leap::result<verdict> v = leap::error{"no verdict"};
    double submitted_s = 0;
    double done_s = 0;
  };
  std::vector<record> records(static_cast<std::size_t>(n));
  std::mutex mutex;
  std::condition_variable all_done;
  int finished = 0;
  const auto start = clock_type::now();
  auto seconds = [&] { return ms_since(start) / 1000.0; };

  // The verifier's own view, sampled: how many jobs run, wait for a run slot, compile.
  constexpr auto k_sample = std::chrono::milliseconds(20);
  double sampled_busy_slot_s = 0, sampled_idle_waiting_s = 0, sampled_s = 0;
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    double last = 0, last_print = 0;
    while (!stop.load()) {
      std::this_thread::sleep_for(k_sample);
      const auto l = (*v)->load();
      const double now = seconds();
      const double dt = now - last;
      last = now;
      const int running = static_cast<int>(l.running);
      sampled_busy_slot_s += dt * std::min(running, o.run_slots) / o.run_slots;
      if (l.run_queued > 0 && running < o.run_slots) {
        sampled_idle_waiting_s += dt;
      }
      sampled_s = now;
      if (now - last_print >= 10) {
        last_print = now;
        int done_now = 0;
        {
          std::lock_guard lock(mutex);
          done_now = finished;
        }
        // The figures so far too, so that a run cut short still says what it measured.
        std::printf(
            "[%5.0f s] %d/%d verified (%.2f/min); compile queue %zu, compiling %zu, run queue %zu, "
            "running %zu; run slots busy %.1f%%, free while one waited %.1f s\n",
            now, done_now, n, done_now / now * 60.0, l.compile_queued, l.compiling, l.run_queued,
            l.running, 100.0 * sampled_busy_slot_s / now, sampled_idle_waiting_s);
      }
    }
  });
  int submitted = 0;
  double last_done_s = 0;
  for (; submitted < n; ++submitted) {
    if (o.in_flight > 0) {
      std::unique_lock lock(mutex);
      all_done.wait(lock, [&] { return submitted - finished < o.in_flight; });
    }
    if (o.max_seconds > 0 && seconds() >= o.max_seconds) {
      break;  // checked after waiting for room: the wait may pass the deadline
    }
    const int i = submitted;
    const auto& item = (*items)[static_cast<std::size_t>(i)];
    {
      std::lock_guard lock(mutex);
      records[static_cast<std::size_t>(i)].submitted_s = seconds();
    }
    (*v)->submit(item.t, item.answer, [&, i](leap::result<verdict> r) {
      const double at = seconds();
      std::lock_guard lock(mutex);
      records[static_cast<std::size_t>(i)].v = std::move(r);
      records[static_cast<std::size_t>(i)].done_s = at;
      last_done_s = std::max(last_done_s, at);
      ++finished;
      all_done.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    all_done.wait(lock, [&] { return finished == submitted; });
  }
  const double wall = last_done_s;
  stop = true;
  sampler.join();
  if (submitted < n) {
    std::printf(
        "--max-seconds %.0f: %d of %d candidates submitted (a seeded random prefix of the "
        "batch); the figures below are over those\n",
        o.max_seconds, submitted, n);
  }

  // Per class: the verdicts seen; each candidate's against its expected one.
  std::map<std::string, std::map<std::string, int>> by_class;
  std::vector<std::string> mismatches;
  std::vector<std::tuple<double, int, int>> events;
  double compile_ms = 0, run_ms = 0;
  int built_in_run = 0, cache_hits = 0;
  for (int i = 0; i < submitted; ++i) {
    const auto& item = (*items)[static_cast<std::size_t>(i)];
    const auto& r = records[static_cast<std::size_t>(i)].v;
    const std::string got = r ? std::string(to_string(r->category)) : "error";
    ++by_class[item.klass][got];
    if (got != item.expected) {
      std::string why = r ? r->feedback : r.err().message;
      why = why.substr(0, why.find('\n')).substr(0, 100);
      mismatches.push_back(item.label + " | " + item.klass + " | expected " + item.expected +
                           " | got " + got + " | " + why);
    }
    if (!r) {
      continue;
    }
    compile_ms += r->compile_ms;
    run_ms += r->run_ms;
    cache_hits += r->cache_hit;
    const std::string note = build_note_of(*r);
    built_in_run += note.find("built in its run") != std::string::npos;
    if (r->run_ms > 0) {
      const double end = records[static_cast<std::size_t>(i)].done_s;
      const double run_start = end - r->run_ms / 1000.0;
      events.emplace_back(run_start - r->run_queue_ms / 1000.0, 0, 1);
      events.emplace_back(run_start, 1, -1);
      events.emplace_back(end, -1, 0);
    }
  }
  const slot_view derived = sweep(events, o.run_slots);

  std::printf("\n%-8s %s\n", "class", "verdicts");
  for (const auto& [klass, counts] : by_class) {
    std::string row;
    for (const auto& [what, count] : counts) {
      row += what + " " + std::to_string(count) + "  ";
    }
    std::printf("%-8s %s\n", klass.c_str(), row.c_str());
  }
  std::printf("\nwall %.1f s (to the last verdict), %d verifications: %.2f verifications/min\n",
              wall, submitted, submitted / std::max(wall, 1e-9) * 60.0);
  std::printf(
      "compile stage %.0f s and run stage %.0f s in all (sums over candidates); "
      "compile cache hits %d; runs that built an extension themselves (their build notes, "
      "where the tree has them): %d\n",
      compile_ms / 1000.0, run_ms / 1000.0, cache_hits, built_in_run);
  std::printf(
      "run slots busy (verifier::load() sampled every %lld ms over %.1f s): %.1f%% of the "
      "wall; a slot free while a compiled candidate waited: %.1f s\n",
      static_cast<long long>(k_sample.count()), sampled_s,
      100.0 * sampled_busy_slot_s / std::max(sampled_s, 1e-9), sampled_idle_waiting_s);
  std::printf(
      "run slots busy (from the verdicts: run_ms before each callback, run_queue_ms before "
      "that; slot time outside run_ms counts as free): %.1f%%; free while one waited: "
      "%.1f s\n",
      100.0 * derived.busy_slot_s / std::max(wall, 1e-9), derived.idle_waiting_s);
  if (submitted < n && o.in_flight == 1) {
    // One at a time, the whole batch takes the sum of its candidates' latencies: each estimated
    // by the mean of those verified from its line (else its class, else all).
    std::map<std::string, std::pair<double, int>> by_source, by_klass;
    std::pair<double, int> all{0, 0};
    for (int i = 0; i < submitted; ++i) {
      const auto& item = (*items)[static_cast<std::size_t>(i)];
      const auto& r = records[static_cast<std::size_t>(i)];
      const double s = r.done_s - r.submitted_s;
      for (auto* p : {&by_source[item.source], &by_klass[item.klass], &all}) {
        p->first += s;
        ++p->second;
      }
    }
    double projected = 0;
    int guessed = 0;
    for (const auto& item : *items) {
      const auto mean = [](const std::pair<double, int>& p) { return p.first / p.second; };
      if (by_source.contains(item.source)) {
        projected += mean(by_source[item.source]);
      } else if (by_klass.contains(item.klass)) {
        projected += mean(by_klass[item.klass]);
        ++guessed;
      } else {
        projected += mean(all);
        ++guessed;
      }
    }
    std::printf(
        "projected for all %d one at a time (each the mean latency of its line's verified "
        "candidates; %d from their class's or the overall mean): %.0f s, %.2f verifications/min\n",
        n, guessed, projected, n / std::max(projected, 1e-9) * 60.0);
  }
  if (!mismatches.empty()) {
    std::printf(
        "\n%zu of %d verdicts are not the expected ones:\ncandidate | class | expected | "
        "got | feedback\n",
        mismatches.size(), submitted);
    for (const auto& m : mismatches) {
      std::printf("%s\n", m.c_str());
    }
    return 1;
  }
  std::printf("every verdict is the expected one\n");
  return 0;
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
  bool workers_given = false;
  bool candidates_given = false;
  batch_options batch;
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
      candidates_given = true;
    } else if (a == "--workers") {
      workers_given = true;
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
    } else if (a == "--batch") {
      batch.dir = next();
    } else if (a == "--run-slots") {
      batch.run_slots = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--cpu") {
      batch.cpu = true;
    } else if (a == "--build-in-run") {
      batch.build_in_run = true;
    } else if (a == "--no-pch-ahead") {
      batch.pch_ahead = false;
    } else if (a == "--seed") {
      batch.seed = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--in-flight") {
      batch.in_flight = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--max-seconds") {
      batch.max_seconds = std::max(0.0, std::atof(next().c_str()));
    } else {
      std::fprintf(
          stderr,
          "usage: bench_sandbox [--kind cpp|cuda|python|kernelbench] [--candidates N] [--workers "
          "1,2,4] [--task DIR] [--gpu N] [--python PYTHON (python and kernelbench kinds)] "
          "[--extension (kernelbench: a load_inline CUDA candidate)] [--cpu-extension (the same, a "
          "C++ "
          "extension on the CPU)] [--no-throughput]\n"
          "       bench_sandbox --batch DIR [--candidates N] [--workers W (default 16)] [--gpu N] "
          "[--run-slots N (default 1)] [--cpu] [--build-in-run] [--no-pch-ahead] [--seed S] "
          "[--in-flight K] [--max-seconds S] [--python PYTHON]\n");
      return a == "--help" ? 0 : 1;
    }
  }
  if (!batch.dir.empty()) {
    batch.limit = candidates_given ? static_cast<std::size_t>(n) : 0;
    batch.compile_workers = workers_given ? workers.front() : 16;
    batch.gpu = gpu;
    const int rc = run_batch(batch, [&](const std::string& name) {
      engine_config c;
      c.cache_dir = bench_cache_root() / name;
      if (!python.empty()) {
        c.python = python;
      }
      return c;
    });
    std::error_code ec;
    fs::remove_all(bench_cache_root(), ec);
    return rc;
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
  const fs::path cache_root = bench_cache_root();
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
                    v->compile_ms, v->run_ms, build_note_of(*v).c_str());
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
      if (traits_of(t.kind).gpu && gpu >= 0) {
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

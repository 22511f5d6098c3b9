"""The timing protocol's figures on a GPU host (tools/gpu/check.sh timing).

  timing_check.py write DIR          writes a KernelBench problem and two candidates into DIR
  timing_check.py stability FILE...  the speedups' spread over repeated `leap verify --json` lines
  timing_check.py agree DIR FILE     the same kernels timed by triton.testing.do_bench and by
                                     KernelBench's own loop (CUDA events, no L2 flush), beside
                                     the judge's median from `leap verify --json` (FILE)

Prints plain lines; the numbers go into docs/benchmarks.md and the issue's note.
"""
import json
import math
import statistics
import sys

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        return torch.relu(a @ b) * 0.5 + 1.0

def get_inputs():
    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]

def get_init_inputs():
    return []
'''

# The same computation with its epilogue in a Triton kernel of its own (KernelBench on a GPU asks
# for the candidate's own kernels): cuBLAS's matmul, then relu * 0.5 + 1 in place.
CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _epilogue(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, tl.maximum(x, 0.0) * 0.5 + 1.0, mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        c = torch.mm(a, b)
        n = c.numel()
        _epilogue[(triton.cdiv(n, 1024),)](c, n, BLOCK=1024)
        return c
'''

# A small elementwise kernel: launch-bound, where per-call overheads dominate any timer.
SMALL_PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.sigmoid(x) * x

def get_inputs():
    return [torch.randn(4096)]

def get_init_inputs():
    return []
'''
SMALL_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _silu[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''

# Three more for the agreement table, from memory-bound to compute-bound, each long enough
# (0.5 to 20 ms) that a per-call overhead of about a millisecond shows as a share.
_TRITON_HEAD = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
'''

ADD_PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        return (a + b) * 2.0

def get_inputs():
    return [torch.randn(1 << 27), torch.randn(1 << 27)]

def get_init_inputs():
    return []
'''
ADD_CANDIDATE = _TRITON_HEAD + '''
@triton.jit
def _add2(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, (a + b) * 2.0, mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        y = torch.empty_like(a)
        n = a.numel()
        _add2[(triton.cdiv(n, 4096),)](a, b, y, n, BLOCK=4096)
        return y
'''

SOFTMAX_PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(32768, 4096)]

def get_init_inputs():
    return []
'''
SOFTMAX_CANDIDATE = _TRITON_HEAD + '''
@triton.jit
def _softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        y = torch.empty_like(x)
        rows, cols = x.shape
        _softmax_rows[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
'''

# Long enough that the round trip between the judge's and the runner's Python processes (about
# 1.2 ms a call on the H200) is a smaller share: a 4096^2 fp32 matmul is 137 GFLOP, about 2 to 3 ms
# on an H100 or H200 without TF32. Its reference data fit the default 4 GiB KernelBench scratch: 3
# trials and 8 timing sets of two 64 MiB inputs (1408 MiB) and one 64 MiB output (704 MiB), 2.1 GiB.
# The add, the softmax and the 8192^2 matmul need more (check.sh's TIMING_AGREE_SCRATCH).
MATMUL4K_PROBLEM = PROBLEM.replace("torch.randn(2048, 2048), torch.randn(2048, 2048)",
                                   "torch.randn(4096, 4096), torch.randn(4096, 4096)")

BIG_PROBLEM = PROBLEM.replace("torch.randn(2048, 2048), torch.randn(2048, 2048)",
                              "torch.randn(8192, 8192), torch.randn(8192, 8192)")

# label, problem file, solution file, problem text, solution text
KERNELS = (
    ("matmul_relu", "problem.py", "solution.py", PROBLEM, CANDIDATE),
    ("silu_small", "small_problem.py", "small_solution.py", SMALL_PROBLEM, SMALL_CANDIDATE),
    ("add_large", "add_problem.py", "add_solution.py", ADD_PROBLEM, ADD_CANDIDATE),
    ("softmax_rows", "softmax_problem.py", "softmax_solution.py", SOFTMAX_PROBLEM, SOFTMAX_CANDIDATE),
    ("matmul_relu_big", "big_problem.py", "big_solution.py", BIG_PROBLEM, CANDIDATE),
    ("matmul4k", "matmul4k_problem.py", "matmul4k_solution.py", MATMUL4K_PROBLEM, CANDIDATE),
)


def write(d):
    for _, problem, solution, problem_text, solution_text in KERNELS:
        for name, text in ((problem, problem_text), (solution, solution_text)):
            with open(f"{d}/{name}", "w") as f:
                f.write(text)


def cv(xs):
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 and statistics.mean(xs) else float("nan")


def stability(files):
    """Per file of `leap verify --json` lines: the speedups' and each side's medians' spread.

    A file named *_shared.jsonl holds verifications on one compile cache (the baselines timed once,
    so their medians are one value: the speedup's spread is the candidate's); *_fresh.jsonl, each on
    a fresh cache (every one times the baselines again: their own spread). Returns
    {file: {figure: CV}} for the summary."""
    figures = {}
    for path in files:
        rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
        timed = [r for r in rows if r.get("speedup")]
        line = f"{path}: {len(rows)} verifications, {len(timed)} with a speedup"
        mine = figures.setdefault(path, {})
        for key in ("speedup", "compiled_speedup"):
            xs = [r[key] for r in rows if r.get(key)]
            if xs:
                mine[key] = cv(xs)
                line += (f"; {key} median {statistics.median(xs):.4f} CV {100 * cv(xs):.2f}%"
                         f" (min {min(xs):.4f}, max {max(xs):.4f})")
        for key, name in (("candidate_time", "candidate"), ("reference_time", "reference"),
                          ("compiled_reference_time", "compiled reference")):
            xs = [r[key]["median_ms"] for r in rows if r.get(key)]
            if xs:
                mine[key] = cv(xs)
                line += (f"; {name} median {statistics.median(xs):.4f} ms, CV {100 * cv(xs):.2f}%"
                         + ("" if key == "candidate_time" else f", {len(set(xs))} distinct"))
        throttled = sum(1 for r in rows if r.get("throttled"))
        line += f"; throttled {throttled}"
        print(line)
        # Which part of the candidate's times moves between verifications: the whole distribution
        # (the GPU's or the host's state) or its middle (per-call jitter a lower quantile escapes).
        timed_rows = [r for r in rows if r.get("candidate_time")]
        cand = [r["candidate_time"] for r in timed_rows]
        if len(cand) > 1:
            print("  candidate's CV across verifications: " + ", ".join(
                f"{k[:-3]} {100 * cv([c[k] for c in cand]):.2f}%"
                for k in ("min_ms", "q1_ms", "median_ms", "q3_ms")))
            for i, c in enumerate(cand):
                print(f"  {i + 1}: min {c['min_ms']:.4f} q1 {c['q1_ms']:.4f} median {c['median_ms']:.4f}"
                      f" q3 {c['q3_ms']:.4f} max {c['max_ms']:.4f} ms ({c['reps']} reps)"
                      f" {timed_rows[i].get('clocks', '')}")
        clocks = [r.get("clocks") for r in rows if r.get("clocks")]
        if clocks:
            print(f"  first clocks: {clocks[0]}")
    for shared in [p for p in figures if p.endswith("_shared.jsonl")]:
        fresh = shared[: -len("_shared.jsonl")] + "_fresh.jsonl"
        name = shared.rsplit("/", 1)[-1][: -len("_shared.jsonl")]
        s, f = figures[shared], figures.get(fresh, {})

        def pct(d, key):
            return f"{100 * d[key]:.2f}%" if key in d and not math.isnan(d[key]) else "n/a"

        print(f"{name}: speedup CV on one cache {pct(s, 'speedup')} (target <= 3%), over "
              f"torch.compile {pct(s, 'compiled_speedup')}; the baselines' own CV on fresh caches: "
              f"eager {pct(f, 'reference_time')}, torch.compile {pct(f, 'compiled_reference_time')}; "
              f"the speedup's CV there {pct(f, 'speedup')}")
    return figures


def agree(d, verdicts_path):
    import importlib.util
    import torch
    import triton.testing

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    def kernelbench_loop(fn, trials=100, warmup=3):
        # KernelBench's time_execution_with_cuda_event: warm-up, then events around each call,
        # synchronised, no L2 flush.
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    judged = {}
    for line in open(verdicts_path):
        if line.startswith("{"):
            r = json.loads(line)
            judged.setdefault(r["label"], r)
    rows = []
    for label, problem, solution, _, _ in KERNELS:
        if label not in judged:
            print(f"{label}: no verdict of the judge to compare with")
            continue
        p = load(f"{d}/{problem}", "problem_" + label)
        s = load(f"{d}/{solution}", "solution_" + label)
        torch.manual_seed(0)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in p.get_inputs()]
        ref = p.Model(*p.get_init_inputs()).cuda()
        cand = s.ModelNew(*p.get_init_inputs()).cuda()
        with torch.no_grad():
            for who, model in (("reference", ref), ("candidate", cand)):
                fn = lambda: model(*inputs)
                bench = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                loop = kernelbench_loop(fn)
                j = judged.get(label, {}).get(f"{who}_time", {}).get("median_ms")
                print(f"{label} {who}: do_bench {bench:.4f} ms, KernelBench loop {loop:.4f} ms, "
                      f"judge {j if j is None else round(j, 4)} ms"
                      + (f" (judge/do_bench {j / bench:.3f}, judge/KernelBench {j / loop:.3f})" if j else ""))
                if j:
                    rows.append((label, who, bench, loop, j))
        del inputs, ref, cand
        torch.cuda.empty_cache()
    # The judge's excess over do_bench per call: constant across kernels if it is the round trip.
    print("| kernel | who | do_bench ms | KernelBench loop ms | judge ms | judge - do_bench ms | judge / do_bench |")
    print("|---|---|---|---|---|---|---|")
    for label, who, bench, loop, j in rows:
        print(f"| {label} | {who} | {bench:.4f} | {loop:.4f} | {j:.4f} | {j - bench:+.4f} | {j / bench:.3f} |")
    speedups = {}
    for label, who, bench, loop, j in rows:
        speedups.setdefault(label, {})[who] = (bench, j)
    for label, pair in speedups.items():
        if "reference" in pair and "candidate" in pair:
            b = pair["reference"][0] / pair["candidate"][0]
            jj = pair["reference"][1] / pair["candidate"][1]
            print(f"{label}: speedup by do_bench {b:.3f}, by the judge {jj:.3f} ({100 * (jj / b - 1):+.1f}%)")


def cost(path):
    """Per kernel of the `timingcost` phase (lines with "label" and "mode": untimed or timed): the
    median verify and run seconds of each mode and what timing adds to them."""
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    for label in sorted({r["label"] for r in rows}):
        medians = {}
        for mode in ("untimed", "timed"):
            mine = [r for r in rows if r["label"] == label and r["mode"] == mode]
            passed = sum(1 for r in mine if r.get("passed"))
            if not mine:
                continue
            medians[mode] = (statistics.median(r["verify_ms"] for r in mine) / 1000,
                             statistics.median(r["run_ms"] for r in mine) / 1000)
            print(f"{label} {mode}: {len(mine)} verifications, {passed} passed; median verify "
                  f"{medians[mode][0]:.2f} s, run {medians[mode][1]:.2f} s")
        if len(medians) == 2:
            (uv, ur), (tv, tr) = medians["untimed"], medians["timed"]
            print(f"{label}: timing adds {tv - uv:+.2f} s to a verification ({tv / uv:.2f}x) and "
                  f"{tr - ur:+.2f} s to its run on the GPU slot ({tr / ur:.2f}x)")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    elif sys.argv[1] == "stability":
        stability(sys.argv[2:])
    elif sys.argv[1] == "cost":
        cost(sys.argv[2])
    elif sys.argv[1] == "agree":
        agree(sys.argv[2], sys.argv[3])

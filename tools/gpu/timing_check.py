"""The timing protocol's figures on a GPU host (tools/gpu/check.sh timing).

  timing_check.py write DIR          writes a KernelBench problem and two candidates into DIR
  timing_check.py stability FILE...  the speedups' spread over repeated `leap verify --json` lines
  timing_check.py agree DIR FILE     the same kernels timed by triton.testing.do_bench and by
                                     KernelBench's own loop (CUDA events, no L2 flush), beside
                                     the judge's median from `leap verify --json` (FILE)

Prints plain lines; the numbers go into the README's Benchmarks table and the issue's note.
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


def write(d):
    for name, text in {"problem.py": PROBLEM, "solution.py": CANDIDATE,
                       "small_problem.py": SMALL_PROBLEM, "small_solution.py": SMALL_CANDIDATE}.items():
        with open(f"{d}/{name}", "w") as f:
            f.write(text)


def cv(xs):
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 and statistics.mean(xs) else float("nan")


def stability(files):
    for path in files:
        rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
        timed = [r for r in rows if r.get("speedup")]
        line = f"{path}: {len(rows)} verifications, {len(timed)} with a speedup"
        for key in ("speedup", "compiled_speedup"):
            xs = [r[key] for r in rows if r.get(key)]
            if xs:
                line += (f"; {key} median {statistics.median(xs):.4f} CV {100 * cv(xs):.2f}%"
                         f" (min {min(xs):.4f}, max {max(xs):.4f})")
        cand = [r["candidate_time"]["median_ms"] for r in rows if r.get("candidate_time")]
        ref = [r["reference_time"]["median_ms"] for r in rows if r.get("reference_time")]
        if cand:
            line += f"; candidate median ms CV {100 * cv(cand):.2f}%"
        if ref:
            line += f"; reference median ms CV {100 * cv(ref):.2f}%"
        throttled = sum(1 for r in rows if r.get("throttled"))
        line += f"; throttled {throttled}"
        print(line)
        clocks = [r.get("clocks") for r in rows if r.get("clocks")]
        if clocks:
            print(f"  first clocks: {clocks[0]}")


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
    for label, problem, solution in (("matmul_relu", "problem.py", "solution.py"),
                                     ("silu_small", "small_problem.py", "small_solution.py")):
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


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    elif sys.argv[1] == "stability":
        stability(sys.argv[2:])
    elif sys.argv[1] == "agree":
        agree(sys.argv[2], sys.argv[3])

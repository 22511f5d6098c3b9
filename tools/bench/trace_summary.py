#!/usr/bin/env python3
"""Where the GPU time of one update step goes, from Chrome traces written by
`bench_learner --trace FILE` and `learner/standalone/bench_hf.py ... --trace FILE`.

    tools/bench/trace_summary.py TRACE.json [TRACE.json ...]

For each trace: the span of the step, the GPU's busy time in it (kernels and copies), and per phase
(the `leap::*` annotations both benchmarks put around forward, log-probs, backward, gradient norm
and AdamW) the wall time and the GPU time of the kernels launched inside it; then the kernels
grouped into families, largest first. Traces of several steps are summed.
"""
import gzip
import json
import re
import sys
from collections import defaultdict

FAMILIES = [
    ("matmul", re.compile(r"gemm|cutlass|sm\d+_xmma|nvjet|cublas|splitK", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|efficient_attention", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("optimizer (multi-tensor)", re.compile(r"multi_tensor|foreach|fused_adam", re.I)),
    ("reduction", re.compile(r"reduce|norm_kernel|sum_kernel", re.I)),
    ("copy / cast", re.compile(r"copy|cast|Memcpy|Memset", re.I)),
    ("index / gather / scatter / embedding", re.compile(r"index|gather|scatter|embedding", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|CUDAFunctor|pointwise", re.I)),
]


def family(name):
    for label, pattern in FAMILIES:
        if pattern.search(name):
            return label
    return "other"


def summarise(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            corr = e.get("args", {}).get("correlation")
            if corr is not None:
                launches[corr] = e["ts"]
    # Python's record_function gives "user_annotation" events, C++'s RECORD_FUNCTION "cpu_op" ones.
    phases = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
              and e.get("name", "").startswith("leap::")]
    if not gpu:
        print(f"{path}: no GPU activity in the trace")
        return
    start = min(e["ts"] for e in gpu)
    end = max(e["ts"] + e["dur"] for e in gpu)
    busy = sum(e["dur"] for e in gpu)
    print(f"== {path}")
    print(f"GPU span {(end - start) / 1e3:.1f} ms, kernels and copies {busy / 1e3:.1f} ms "
          f"({100 * busy / max(end - start, 1):.0f}% busy), {len(gpu)} of them")

    by_phase = defaultdict(lambda: [0.0, 0.0, 0])  # wall us, gpu us, kernels
    for p in phases:
        by_phase[p["name"]][0] += p["dur"]
    for k in gpu:
        launched = launches.get(k.get("args", {}).get("correlation"))
        if launched is None:
            continue
        for p in phases:
            if p["ts"] <= launched <= p["ts"] + p["dur"]:
                entry = by_phase[p["name"]]
                entry[1] += k["dur"]
                entry[2] += 1
                break
    if by_phase:
        print(f"{'phase':<18}{'wall ms':>10}{'GPU ms':>10}{'kernels':>9}")
        for name, (wall, gpu_us, count) in sorted(by_phase.items(), key=lambda kv: -kv[1][1]):
            print(f"{name:<18}{wall / 1e3:>10.1f}{gpu_us / 1e3:>10.1f}{count:>9}")

    families = defaultdict(lambda: [0.0, 0])
    kernels = defaultdict(lambda: [0.0, 0])
    for k in gpu:
        families[family(k["name"])][0] += k["dur"]
        families[family(k["name"])][1] += 1
        kernels[k["name"]][0] += k["dur"]
        kernels[k["name"]][1] += 1
    print(f"{'family':<40}{'GPU ms':>10}{'count':>8}")
    for name, (us, count) in sorted(families.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:<40}{us / 1e3:>10.1f}{count:>8}")
    print("top kernels:")
    for name, (us, count) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"  {us / 1e3:8.1f} ms {count:6d}x  {name[:110]}")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    for path in sys.argv[1:]:
        summarise(path)


if __name__ == "__main__":
    main()

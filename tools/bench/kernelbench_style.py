#!/usr/bin/env python3
"""KernelBench-style evaluation of CUDA candidates, the baseline of bench_sandbox's cuda numbers.

KernelBench evaluates a generated kernel by building it into a PyTorch extension with
torch.utils.cpp_extension.load_inline and comparing ModelNew's outputs with the reference Model
over a few correctness trials. This script does that for N candidates of the same kernel that
bench_sandbox uses for `--kind cuda` (y = 2 * x over 65,536 floats), each made distinct by a
comment so that nothing is cached between them, and reports candidates per second:

  serial    one candidate at a time: build, load, check (KernelBench's single-process loop)
  parallel  builds in W worker processes first (as KernelBench's eval script can precompile with
            several CPU workers), then loads and checks every candidate in this process

Usage: kernelbench_style.py [--candidates N] [--serial N] [--workers W] [--trials T]
Needs python3 with a CUDA build of torch and nvcc; prints a table. Writes only under a temporary folder.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time

CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor solve_torch(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
CPP_SOURCE = "torch::Tensor solve_torch(torch::Tensor x);"


def build(args):
    """Builds candidate `index` into `root`/cand_<salt>_<index>; returns (index, seconds)."""
    index, salt, root = args
    from torch.utils.cpp_extension import load_inline

    name = f"cand_{salt}_{index}"
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    start = time.perf_counter()
    load_inline(
        name=name,
        cpp_sources=CPP_SOURCE,
        cuda_sources=f"// candidate {salt}-{index}\n" + CUDA_SOURCE,
        functions=["solve_torch"],
        build_directory=folder,
        verbose=False,
    )
    return index, time.perf_counter() - start


def check(index, salt, root, trials):
    """Loads the built candidate and runs KernelBench-style correctness trials against torch."""
    import torch
    from torch.utils.cpp_extension import load_inline

    name = f"cand_{salt}_{index}"
    module = load_inline(
        name=name,
        cpp_sources=CPP_SOURCE,
        cuda_sources=f"// candidate {salt}-{index}\n" + CUDA_SOURCE,
        functions=["solve_torch"],
        build_directory=os.path.join(root, name),
        verbose=False,
    )
    for trial in range(trials):
        torch.manual_seed(trial)
        x = torch.randn(1 << 16, device="cuda")
        expected = 2.0 * x
        got = module.solve_torch(x)
        torch.cuda.synchronize()
        if not torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            raise SystemExit(f"candidate {index}: wrong output in trial {trial}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", type=int, default=16, help="candidates for the parallel mode")
    parser.add_argument("--serial", type=int, default=4, help="candidates for the serial mode")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="build processes (parallel)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials per candidate")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("kernelbench_style.py: no CUDA device visible to torch")
    root = tempfile.mkdtemp(prefix="leap-kernelbench-style-")
    salt = str(os.getpid())
    try:
        print(f"KernelBench-style load_inline evaluation, torch {torch.__version__}, "
              f"{torch.cuda.get_device_name(0)}", flush=True)
        print(f"\n{'mode':<10} {'candidates':>10} {'workers':>8} {'median build s':>15} {'total s':>9} {'candidates/s':>13}",
              flush=True)

        def row(mode, n, workers, median_build, elapsed):
            print(f"{mode:<10} {n:>10} {workers:>8} {median_build:>15.2f} {elapsed:>9.2f} {n / elapsed:>13.3f}",
                  flush=True)

        if args.serial > 0:
            start = time.perf_counter()
            builds = []
            for i in range(args.serial):
                _, seconds = build((i, salt + "s", root))
                builds.append(seconds)
                print(f"  serial candidate {i}: built in {seconds:.1f} s", flush=True)
                check(i, salt + "s", root, args.trials)
            elapsed = time.perf_counter() - start
            row("serial", args.serial, 1, sorted(builds)[len(builds) // 2], elapsed)
        if args.candidates > 0:
            start = time.perf_counter()
            ctx = mp.get_context("spawn")
            with ctx.Pool(args.workers) as pool:
                builds = [s for _, s in pool.map(build, [(i, salt + "p", root) for i in range(args.candidates)])]
            for i in range(args.candidates):
                check(i, salt + "p", root, args.trials)
            elapsed = time.perf_counter() - start
            row("parallel", args.candidates, args.workers, sorted(builds)[len(builds) // 2], elapsed)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

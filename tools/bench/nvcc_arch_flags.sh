#!/bin/bash
# Times nvcc command lines of the sandbox's cuda candidate build (candidate .cu + the harness object
# built by g++), interleaved so that the machine's noise hits every variant alike, and runs each
# binary once. Needs a GPU of sm_90a (H100/H200) for the run column. Writes only a temporary folder.
# usage: tools/bench/nvcc_arch_flags.sh [NVCC] [REPS]      (default: nvcc on PATH, 3)
set -euo pipefail
nvcc=${1:-$(command -v nvcc)}; reps=${2:-3}
work=$(mktemp -d); cd "$work"
cat > harness.cpp <<'H'
#include <cuda_runtime.h>
#include <cstdio>
void solve(const float* x, float* y, int n);
int main(){ float *x,*y; cudaMalloc(&x,4096); cudaMalloc(&y,4096); solve(x,y,1024); cudaDeviceSynchronize(); printf("ok\n"); }
H
inc=$(dirname $(dirname $(readlink -f $nvcc)))/include
g++ -std=c++17 -O2 -I$inc -c harness.cpp -o harness.o
cat > cand.cu <<'C'
__global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
void solve(const float* x, float* y, int n) { k<<<(n + 255) / 256, 256>>>(x, y, n); }
C
declare -A variants=(
  [a_current]="-std=c++17 -O2 -arch=sm_90a"
  [b_sass_only]="-std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a"
  [c_sass_host_O0]="-std=c++17 -O0 -gencode arch=compute_90a,code=sm_90a"
  [d_c_shared_rt]="-std=c++17 -O0 -gencode arch=compute_90a,code=sm_90a -cudart shared"
  [e_current_shared_rt]="-std=c++17 -O2 -arch=sm_90a -cudart shared"
)
for r in $(seq $reps); do
  for v in $(echo "${!variants[@]}" | tr ' ' '\n' | sort); do
    s=$EPOCHREALTIME
    $nvcc ${variants[$v]} cand.cu harness.o -o cand_$v || echo "FAILED $v"
    e=$EPOCHREALTIME
    s2=$EPOCHREALTIME; ./cand_$v >/dev/null || true; e2=$EPOCHREALTIME
    echo "$v compile $(awk "BEGIN{print $e-$s}") run $(awk "BEGIN{print $e2-$s2}")"
  done
done | sort | awk '{c[$1]=c[$1]" "$3; r[$1]=r[$1]" "$5} END {for (k in c) print k, "compile:", c[k], " run:", r[k]}' | sort
rm -rf "$work"

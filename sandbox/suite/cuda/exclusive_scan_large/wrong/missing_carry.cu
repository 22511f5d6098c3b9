#include <cuda_runtime.h>

#define BS 1024

// Exclusive scan of one BS-element chunk per block; the chunk total goes to sums[blockIdx.x].
__global__ void block_scan(const int* x, int* y, int* sums, int n) {
  __shared__ int buf[2][BS];
  int t = threadIdx.x;
  int g = blockIdx.x * BS + t;
  int v0 = g < n ? x[g] : 0;
  int in = 0;
  buf[0][t] = v0;
  __syncthreads();
  for (int off = 1; off < BS; off <<= 1) {
    int v = buf[in][t];
    if (t >= off) v += buf[in][t - off];
    buf[1 - in][t] = v;
    __syncthreads();
    in = 1 - in;
  }
  if (g < n) y[g] = buf[in][t] - v0;
  if (sums != nullptr && t == BS - 1) sums[blockIdx.x] = buf[in][t];
}

__global__ void add_offsets(int* y, const int* offsets, int n) {
  int g = blockIdx.x * BS + threadIdx.x;
  if (g < n) y[g] += offsets[blockIdx.x];
}

static void scan_device(const int* x, int* y, int n) {
  int blocks = (n + BS - 1) / BS;
  if (blocks == 1) {
    block_scan<<<1, BS>>>(x, y, nullptr, n);
    return;
  }
  int* sums = nullptr;
  int* offsets = nullptr;
  cudaMalloc(&sums, blocks * sizeof(int));
  cudaMalloc(&offsets, blocks * sizeof(int));
  block_scan<<<blocks, BS>>>(x, y, sums, n);
  cudaFree(sums);
  cudaFree(offsets);
}

void solve(const int* x, int* y, int n) {
  scan_device(x, y, n);
}

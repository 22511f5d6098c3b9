#include <cuda_runtime.h>

#define BS 1024

__global__ void count_kernel(const float* x, int* counts, int n) {
  __shared__ int c;
  if (threadIdx.x == 0) c = 0;
  __syncthreads();
  int g = blockIdx.x * BS + threadIdx.x;
  if (g < n && x[g] > 0.0f) atomicAdd(&c, 1);
  __syncthreads();
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

__global__ void offsets_kernel(const int* counts, int* offsets, int* total, int blocks) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    int s = 0;
    for (int b = 0; b < blocks; ++b) {
      offsets[b] = s;
      s += counts[b];
    }
    *total = s;
  }
}

// Order-preserving scatter: a block-local scan of the keep flags gives each kept element its slot.
__global__ void scatter_kernel(const float* x, const int* offsets, float* out, int n) {
  __shared__ int buf[2][BS];
  int t = threadIdx.x;
  int g = blockIdx.x * BS + t;
  int flag = (g < n && x[g] > 0.0f) ? 1 : 0;
  int in = 0;
  buf[0][t] = flag;
  __syncthreads();
  for (int off = 1; off < BS; off <<= 1) {
    int v = buf[in][t];
    if (t >= off) v += buf[in][t - off];
    buf[1 - in][t] = v;
    __syncthreads();
    in = 1 - in;
  }
  if (flag) out[offsets[blockIdx.x] + buf[in][t] - 1] = x[g];
}

void solve(const float* x, float* out, int* count, int n) {
  int blocks = (n + BS - 1) / BS;
  int *counts, *offsets;
  cudaMalloc(&counts, blocks * sizeof(int));
  cudaMalloc(&offsets, blocks * sizeof(int));
  cudaMemset(out, 0, n * sizeof(float));
  count_kernel<<<blocks, BS>>>(x, counts, n);
  offsets_kernel<<<1, 1>>>(counts, offsets, count, blocks);
  scatter_kernel<<<blocks, BS>>>(x, offsets, out, n);
  cudaFree(counts);
  cudaFree(offsets);
}

#include <cuda_runtime.h>

__global__ void sum_kernel(const float* x, float* out, int n) {
  __shared__ float sdata[256];
  int tid = threadIdx.x;
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) acc += x[i];
  sdata[tid] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) *out += sdata[0];
}

void solve(const float* x, float* out, int n) {
  cudaMemset(out, 0, sizeof(float));
  int blocks = (n + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  sum_kernel<<<blocks, 256>>>(x, out, n);
}

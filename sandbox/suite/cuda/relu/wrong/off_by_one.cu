#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x + 1) {
    y[i] = fmaxf(x[i], 0.0f);
  }
}

void solve(const float* x, float* y, int n) {
  int threads = 256;
  int blocks = 64;
  relu_kernel<<<blocks, threads>>>(x, y, n);
}

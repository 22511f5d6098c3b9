#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = x[i] > 0.0f ? x[i] : 0.01f * x[i];
  }
}

void solve(const float* x, float* y, int n) {
  int threads = 256;
  int blocks = (n + threads - 1) / threads;
  relu_kernel<<<blocks, threads>>>(x, y, n);
}

#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

__global__ void gelu_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu(x[i]);
}

void solve(const float* x, float* y, int n) {
  gelu_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
}

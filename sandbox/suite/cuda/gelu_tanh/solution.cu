#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  float inner = k * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__global__ void gelu_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu(x[i]);
}

void solve(const float* x, float* y, int n) {
  gelu_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
}

#include <cuda_runtime.h>

__global__ void compact_kernel(const float* x, float* out, int* count, int n) {
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n && x[g] > 0.0f) {
    int slot = atomicAdd(count, 1);
    out[slot] = x[g];
  }
}

void solve(const float* x, float* out, int* count, int n) {
  cudaMemset(out, 0, n * sizeof(float));
  cudaMemset(count, 0, sizeof(int));
  compact_kernel<<<(n + 255) / 256, 256>>>(x, out, count, n);
}

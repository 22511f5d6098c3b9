#include <cuda_runtime.h>

__global__ int embed_kernel(const float* table, const int* ids, float* out, int D, int B) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * D) return;
  int b = i / D, d = i % D;
  out[i] = table[(size_t)ids[b] * D + d];
}

void solve(const float* table, const int* ids, float* out, int V, int D, int B) {
  int total = B * D;
  embed_kernel<<<(total + 255) / 256, 256>>>(table, ids, out, D, B);
}

#include <cuda_runtime.h>

#define BLOCK 256

// Each block stages its BLOCK outputs' inputs plus the halo in shared memory.
__global__ void conv1d_kernel(const float* x, const float* w, float* y, int n, int k) {
  extern __shared__ float tile[];
  int r = k / 2;
  int base = blockIdx.x * BLOCK;
  for (int t = threadIdx.x; t < BLOCK + k - 1; t += BLOCK) {
    int g = base + t - r;
    tile[t] = (g >= 0 && g < n) ? x[g] : 0.0f;
  }
  __syncthreads();
  int i = base + threadIdx.x;
  if (i < n) {
    float acc = 0.0f;
    for (int j = 0; j < k - 1; ++j) acc += tile[threadIdx.x + j] * w[j];
    y[i] = acc;
  }
}

void solve(const float* x, const float* w, float* y, int n, int k) {
  int blocks = (n + BLOCK - 1) / BLOCK;
  size_t smem = (BLOCK + k - 1) * sizeof(float);
  conv1d_kernel<<<blocks, BLOCK, smem>>>(x, w, y, n, k);
}

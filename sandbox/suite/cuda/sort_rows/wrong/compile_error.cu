#include <cuda_runtime.h>

#define N 1024

// Bitonic sort of one row per block, one element per thread (cols == 1024).
__global__ void bitonic_rows(const float* x, float* y) {
  __shared__ float s[N];
  int t = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * N;
  s[t] = xr[t];
  __syncthreads();
  for (int k = 2; k <= N; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      int p = t ^ j;
      if (p > t) {
        bool ascending = (t & k) == 0;
        if ((s[t] > s[p]) == ascending) swap(s[t], s[p]);
      }
      __syncthreads();
    }
  }
  y[(size_t)blockIdx.x * N + t] = s[t];
}

void solve(const float* x, float* y, int rows, int cols) {
  bitonic_rows<<<rows, N>>>(x, y);
}

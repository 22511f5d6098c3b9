#include <cuda_runtime.h>

__global__ void hist_kernel(const int* data, int* hist, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) hist[data[i]] += 1;
}

void solve(const int* data, int* hist, int n, int nbins) {
  cudaMemset(hist, 0, nbins * sizeof(int));
  hist_kernel<<<(n + 255) / 256, 256>>>(data, hist, n);
}

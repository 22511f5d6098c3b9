#include <cuda_runtime.h>

// Per-block histogram in shared memory, merged into the global one with one atomic per bin.
__global__ void hist_kernel(const int* data, int* hist, int n, int nbins) {
  extern __shared__ int local[];
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[data[i]], 1);
  for (int b = threadIdx.x; b < nbins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}

void solve(const int* data, int* hist, int n, int nbins) {
  cudaMemset(hist, 0, nbins * sizeof(int));
  hist_kernel<<<128, 256, nbins * sizeof(int)>>>(data, hist, n, nbins);
}

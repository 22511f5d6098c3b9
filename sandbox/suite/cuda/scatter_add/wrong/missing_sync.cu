#include <cuda_runtime.h>

// Bins are privatised per block in shared memory (m <= 4096), then merged with global atomics.
__global__ void scatter_add_kernel(const float* src, const int* idx, float* out, int n, int m) {
  extern __shared__ float bins[];
  for (int j = threadIdx.x; j < m; j += blockDim.x) bins[j] = 0.0f;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&bins[idx[i]], src[i]);
  for (int j = threadIdx.x; j < m; j += blockDim.x) atomicAdd(&out[j], bins[j]);
}

void solve(const float* src, const int* idx, float* out, int n, int m) {
  cudaMemset(out, 0, m * sizeof(float));
  scatter_add_kernel<<<64, 256, m * sizeof(float)>>>(src, idx, out, n, m);
}

#include <cuda_runtime.h>
#include <math.h>

__global__ void block_max(const float* x, float* partial, int n) {
  __shared__ int s[256];
  int tid = threadIdx.x;
  float m = -INFINITY;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) m = fmaxf(m, x[i]);
  s[tid] = m;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] = fmaxf(s[tid], s[tid + stride]);
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = s[0];
}

void solve(const float* x, float* out, int n) {
  int blocks = (n + 255) / 256;
  if (blocks > 256) blocks = 256;
  float* partial = nullptr;
  cudaMalloc(&partial, blocks * sizeof(float));
  block_max<<<blocks, 256>>>(x, partial, n);
  block_max<<<1, 256>>>(partial, out, blocks);
  cudaFree(partial);
}

#include <cuda_runtime.h>

__global__ void sumsq_kernel(const float* x, float* acc, int n) {
  __shared__ float s[256];
  int tid = threadIdx.x;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i] * x[i];
  s[tid] = v;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) atomicAdd(acc, sqrtf(s[0]));
}

void solve(const float* x, float* out, int n) {
  cudaMemset(out, 0, sizeof(float));
  sumsq_kernel<<<256, 256>>>(x, out, n);
}

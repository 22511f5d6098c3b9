#include <cuda_runtime.h>

__inline__ __device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__global__ void dot_kernel(const float* a, const float* b, float* out, int n) {
  __shared__ float warp_sums[32];
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) acc += a[i] * b[i];
  acc = warp_sum(acc);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = acc;
  if (warp == 0) {
    float v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) atomicAdd(out, v);
  }
}

void solve(const float* a, const float* b, float* out, int n) {
  cudaMemset(out, 0, sizeof(float));
  dot_kernel<<<512, 256>>>(a, b, out, n);
}

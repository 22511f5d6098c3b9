#include <cuda_runtime.h>
#include <math.h>

__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int rows, int cols, float eps) {
  extern __shared__ float red[];
  int r = blockIdx.x, tid = threadIdx.x;
  const float* xr = x + (size_t)r * cols;
  float s1 = 0.0f;
  for (int c = tid; c < cols; c += blockDim.x) s1 += xr[c];
  red[tid] = s1;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  float mean = red[0] / cols;
  __syncthreads();
  float sq = 0.0f;
  for (int c = tid; c < cols; c += blockDim.x) sq += (xr[c] - mean) * (xr[c] - mean);
  red[tid] = sq;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  float inv_rms = rsqrtf(red[0] / cols + eps);
  for (int c = tid; c < cols; c += blockDim.x) y[(size_t)r * cols + c] = (xr[c] - mean) * inv_rms * w[c];
}

void solve(const float* x, const float* w, float* y, int rows, int cols, float eps) {
  int threads = 256;
  rmsnorm_kernel<<<rows, threads, threads * sizeof(float)>>>(x, w, y, rows, cols, eps);
}

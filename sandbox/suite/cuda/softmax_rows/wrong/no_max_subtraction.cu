#include <cuda_runtime.h>
#include <math.h>

__global__ void softmax_kernel(const float* x, float* y, int rows, int cols) {
  __shared__ float red[256];
  int r = blockIdx.x, tid = threadIdx.x;
  const float* xr = x + (size_t)r * cols;
  float* yr = y + (size_t)r * cols;

  float m = -INFINITY;
  for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
  red[tid] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  float row_max = red[0];
  __syncthreads();

  float sum = 0.0f;
  for (int c = tid; c < cols; c += blockDim.x) sum += expf(xr[c]);
  red[tid] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  float inv = 1.0f / red[0];

  for (int c = tid; c < cols; c += blockDim.x) yr[c] = expf(xr[c]) * inv;
}

void solve(const float* x, float* y, int rows, int cols) {
  softmax_kernel<<<rows, 256>>>(x, y, rows, cols);
}

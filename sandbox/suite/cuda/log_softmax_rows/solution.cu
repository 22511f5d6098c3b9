#include <cuda_runtime.h>
#include <math.h>

#define THREADS 256

__global__ void log_softmax_kernel(const float* x, float* y, int rows, int cols) {
  __shared__ float red[THREADS];
  int r = blockIdx.x, tid = threadIdx.x;
  const float* xr = x + (size_t)r * cols;

  float m = -INFINITY;
  for (int c = tid; c < cols; c += THREADS) m = fmaxf(m, xr[c]);
  red[tid] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();

  float sum = 0.0f;
  for (int c = tid; c < cols; c += THREADS) sum += expf(xr[c] - m);
  red[tid] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  float log_sum = logf(red[0]);

  for (int c = tid; c < cols; c += THREADS) y[(size_t)r * cols + c] = xr[c] - m - log_sum;
}

void solve(const float* x, float* y, int rows, int cols) {
  log_softmax_kernel<<<rows, THREADS>>>(x, y, rows, cols);
}

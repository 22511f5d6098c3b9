#include <cuda_runtime.h>
#include <math.h>

__global__ void ce_kernel(const float* logits, const float* labels, float* loss, int rows, int classes) {
  __shared__ float red[256];
  int r = blockIdx.x, tid = threadIdx.x;
  const float* row = logits + (size_t)r * classes;
  float m = -INFINITY;
  for (int c = tid; c < classes; c += blockDim.x) m = fmaxf(m, row[c]);
  red[tid] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int c = tid; c < classes; c += blockDim.x) sum += expf(row[c] - m);
  red[tid] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  if (tid == 0) loss[r] = m + logf(red[0]) - row[(int)labels[r]];
}

void solve(const float* logits, const int* labels, float* loss, int rows, int classes) {
  ce_kernel<<<rows, 256>>>(logits, (const float*)labels, loss, rows, classes);
}

#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* x, float* out, int rows, int cols) {
  __shared__ float sdata[256];
  int r = blockIdx.x;
  int tid = threadIdx.x;
  float acc = 0.0f;
  for (int c = tid; c < cols; c += blockDim.x) acc += x[r * cols + c];
  sdata[tid] = acc;
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
  }
  if (tid == 0) out[r] = sdata[0];
}

void solve(const float* x, float* out, int rows, int cols) {
  row_sum_kernel<<<rows, 256>>>(x, out, rows, cols);
}

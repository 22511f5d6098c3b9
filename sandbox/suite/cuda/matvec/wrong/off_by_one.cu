#include <cuda_runtime.h>

// One warp per row: lanes stride over the columns, then a shuffle reduction.
__global__ void matvec_kernel(const float* A, const float* x, float* y, int rows, int cols) {
  int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int c = lane; c < cols; c += 32) acc += A[(size_t)row * cols + c] * x[c];
  for (int off = 16; off > 1; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}

void solve(const float* A, const float* x, float* y, int rows, int cols) {
  int threads = 256;
  int blocks = (rows * 32 + threads - 1) / threads;
  matvec_kernel<<<blocks, threads>>>(A, x, y, rows, cols);
}

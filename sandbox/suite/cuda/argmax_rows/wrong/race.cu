#include <cuda_runtime.h>
#include <math.h>

__global__ void argmax_kernel(const float* x, int* idx, int rows, int cols) {
  __shared__ float best_v;
  __shared__ int best_i;
  int r = blockIdx.x, tid = threadIdx.x;
  if (tid == 0) { best_v = -INFINITY; best_i = 0; }
  __syncthreads();
  for (int c = tid; c < cols; c += blockDim.x) {
    float v = x[r * cols + c];
    if (v > best_v) {
      best_v = v;
      best_i = c;
    }
  }
  __syncthreads();
  if (tid == 0) idx[r] = best_i;
}

void solve(const float* x, int* idx, int rows, int cols) {
  argmax_kernel<<<rows, 256>>>(x, idx, rows, cols);
}

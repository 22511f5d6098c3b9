#include <cuda_runtime.h>
#include <math.h>

__global__ void argmax_kernel(const float* x, int* idx, int rows, int cols) {
  __shared__ float best_v[256];
  __shared__ int best_i[256];
  int r = blockIdx.x, tid = threadIdx.x;
  float bv = -INFINITY;
  int bi = cols;
  for (int c = tid; c < cols; c += blockDim.x) {
    float v = x[r * cols + c];
    if (v > bv) { bv = v; bi = c; }
  }
  best_v[tid] = bv;
  best_i[tid] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      float ov = best_v[tid + s];
      int oi = best_i[tid + s];
      if (ov > best_v[tid] || (ov == best_v[tid] && oi < best_i[tid])) {
        best_v[tid] = ov;
        best_i[tid] = oi;
      }
    }
    __syncthreads();
  }
  if (tid == 0) idx[r] = best_i[0];
}

void solve(const float* x, int* idx, int rows, int cols) {
  argmax_kernel<<<rows, 256>>>(x, idx, rows, cols);
}

#include <cuda_runtime.h>
#include <math.h>

#define THREADS 256
#define MAX_COLS 1024

// One block per row: k rounds of block-wide argmax; each winner is masked out for the next round.
__global__ void topk_kernel(const float* x, float* vals, int* idx, int cols, int k) {
  __shared__ float row[MAX_COLS];
  __shared__ float red_v[THREADS];
  __shared__ int red_i[THREADS];
  int r = blockIdx.x, t = threadIdx.x;
  for (int c = t; c < cols; c += THREADS) row[c] = x[(size_t)r * cols + c];
  __syncthreads();
  for (int round = 0; round < k; ++round) {
    float bv = -INFINITY;
    int bi = cols;
    for (int c = t; c < cols; c += THREADS)
      if (row[c] > bv) { bv = row[c]; bi = c; }
    red_v[t] = bv;
    red_i[t] = bi;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
      if (t < s) {
        float ov = red_v[t + s];
        int oi = red_i[t + s];
        if (ov > red_v[t] || (ov == red_v[t] && oi < red_i[t])) {
          red_v[t] = ov;
          red_i[t] = oi;
        }
      }
    }
    if (t == 0) {
      vals[r * k + round] = red_v[0];
      idx[r * k + round] = red_i[0];
      row[red_i[0]] = -INFINITY;
    }
    __syncthreads();
  }
}

void solve(const float* x, float* vals, int* idx, int rows, int cols, int k) {
  topk_kernel<<<rows, THREADS>>>(x, vals, idx, cols, k);
}

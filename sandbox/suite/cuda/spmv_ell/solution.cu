#include <cuda_runtime.h>

__global__ void spmv_ell_kernel(const float* vals, const int* col_idx, const float* x, float* y, int rows,
                                int width) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.0f;
  for (int j = 0; j < width; ++j) {
    int k = r * width + j;
    acc += vals[k] * x[col_idx[k]];
  }
  y[r] = acc;
}

void solve(const float* vals, const int* col_idx, const float* x, float* y, int rows, int width, int ncols) {
  spmv_ell_kernel<<<(rows + 255) / 256, 256>>>(vals, col_idx, x, y, rows, width);
}

#include <cuda_runtime.h>

// One block of cols threads per row; each warp scans its 32 values with shuffles.
__global__ void row_scan_kernel(const int* x, int* y, int cols) {
  int r = blockIdx.x, t = threadIdx.x;
  int lane = t & 31;
  int v = x[r * cols + t];
  for (int off = 1; off < 32; off <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += up;
  }
  y[r * cols + t] = v;
}

void solve(const int* x, int* y, int rows, int cols) {
  row_scan_kernel<<<rows, cols>>>(x, y, cols);
}

#include <cuda_runtime.h>

// One block of cols threads per row; Hillis-Steele scan with two buffers (cols <= 1024).
__global__ void row_scan_kernel(const int* x, int* y, int cols) {
  __shared__ int buf[2][1024];
  int r = blockIdx.x, t = threadIdx.x;
  int in = 0;
  buf[0][t] = x[r * cols + t];
  __syncthreads();
  for (int off = 1; off < cols; off <<= 1) {
    int v = buf[in][t];
    if (t >= off) v += buf[in][t - off];
    buf[1 - in][t] = v;
    __syncthreads();
    in = 1 - in;
  }
  y[r * cols + t] = buf[in][t];
}

void solve(const int* x, int* y, int rows, int cols) {
  row_scan_kernel<<<rows, cols>>>(x, y, cols);
}

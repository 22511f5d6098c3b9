#include <cuda_runtime.h>

__global__ void maxpool_kernel(const float* x, float* y, int C, int OH, int OW) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.z;
  if (i >= OH || j >= OW) return;
  int W = 2 * OW, H = 2 * OH;
  float m = 0.0f;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) m = fmaxf(m, x[((size_t)c * H + 2 * i + a) * W + 2 * j + b]);
  y[((size_t)c * OH + i) * OW + j] = m;
}

void solve(const float* x, float* y, int C, int OH, int OW) {
  dim3 block(16, 16);
  dim3 grid((OW + 15) / 16, (OH + 15) / 16, C);
  maxpool_kernel<<<grid, block>>>(x, y, C, OH, OW);
}

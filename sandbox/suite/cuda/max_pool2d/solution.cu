#include <cuda_runtime.h>

__global__ void maxpool_kernel(const float* x, float* y, int C, int OH, int OW) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.z;
  if (i >= OH || j >= OW) return;
  int W = 2 * OW, H = 2 * OH;
  const float* p = x + ((size_t)c * H + 2 * i) * W + 2 * j;
  float m = fmaxf(fmaxf(p[0], p[1]), fmaxf(p[W], p[W + 1]));
  y[((size_t)c * OH + i) * OW + j] = m;
}

void solve(const float* x, float* y, int C, int OH, int OW) {
  dim3 block(16, 16);
  dim3 grid((OW + 15) / 16, (OH + 15) / 16, C);
  maxpool_kernel<<<grid, block>>>(x, y, C, OH, OW);
}

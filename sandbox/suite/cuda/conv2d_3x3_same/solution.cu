#include <cuda_runtime.h>

__global__ void conv3x3(const float* in, const float* w, float* out, int H, int W) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= W || y >= H) return;
  float acc = 0.0f;
  for (int dy = -1; dy <= 1; ++dy) {
    int yy = y + dy;
    if (yy < 0 || yy >= H) continue;
    for (int dx = -1; dx <= 1; ++dx) {
      int xx = x + dx;
      if (xx < 0 || xx >= W) continue;
      acc += in[yy * W + xx] * w[(dy + 1) * 3 + (dx + 1)];
    }
  }
  out[y * W + x] = acc;
}

void solve(const float* in, const float* w, float* out, int H, int W) {
  dim3 block(16, 16);
  dim3 grid((W + 15) / 16, (H + 15) / 16);
  conv3x3<<<grid, block>>>(in, w, out, H, W);
}

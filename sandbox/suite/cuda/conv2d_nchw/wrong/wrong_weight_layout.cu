#include <cuda_runtime.h>

// One thread per output element (n, co, y, x); 3x3 window, stride 1, zero padding 1.
__global__ void conv2d_kernel(const float* in, const float* weight, const float* bias, float* out, int N, int Cin,
                              int Cout, int H, int W) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int total = N * Cout * H * W;
  if (idx >= total) return;
  int x = idx % W;
  int y = (idx / W) % H;
  int co = (idx / (W * H)) % Cout;
  int n = idx / (W * H * Cout);
  float acc = bias[co];
  for (int ci = 0; ci < Cin; ++ci) {
    const float* plane = in + ((size_t)n * Cin + ci) * H * W;
    const float* wk = weight + ((size_t)ci * Cout + co) * 9;
    for (int ky = 0; ky < 3; ++ky) {
      int yy = y + ky - 1;
      if (yy < 0 || yy >= H) continue;
      for (int kx = 0; kx < 3; ++kx) {
        int xx = x + kx - 1;
        if (xx < 0 || xx >= W) continue;
        acc += plane[yy * W + xx] * wk[ky * 3 + kx];
      }
    }
  }
  out[idx] = acc;
}

void solve(const float* in, const float* weight, const float* bias, float* out, int N, int Cin, int Cout, int H,
           int W) {
  int total = N * Cout * H * W;
  conv2d_kernel<<<(total + 255) / 256, 256>>>(in, weight, bias, out, N, Cin, Cout, H, W);
}

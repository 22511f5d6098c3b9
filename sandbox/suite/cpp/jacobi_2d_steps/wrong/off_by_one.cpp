#include <utility>
#include <vector>

void solve(double* u, int H, int W, int steps) {
  std::vector<double> a(u, u + H * W), b(a);
  for (int s = 1; s < steps; ++s) {
    for (int y = 1; y < H - 1; ++y)
      for (int x = 1; x < W - 1; ++x)
        b[y * W + x] = 0.25 * (a[(y - 1) * W + x] + a[(y + 1) * W + x] + a[y * W + x - 1] + a[y * W + x + 1]);
    std::swap(a, b);
  }
  for (int i = 0; i < H * W; ++i) u[i] = a[i];
}

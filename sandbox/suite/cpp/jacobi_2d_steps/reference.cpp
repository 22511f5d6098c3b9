#include <vector>

void reference(double* u, int H, int W, int steps) {
  std::vector<double> next(u, u + H * W);
  for (int s = 0; s < steps; ++s) {
    for (int y = 1; y < H - 1; ++y)
      for (int x = 1; x < W - 1; ++x)
        next[y * W + x] = 0.25 * (u[(y - 1) * W + x] + u[(y + 1) * W + x] + u[y * W + x - 1] + u[y * W + x + 1]);
    for (int i = 0; i < H * W; ++i) u[i] = next[i];
  }
}

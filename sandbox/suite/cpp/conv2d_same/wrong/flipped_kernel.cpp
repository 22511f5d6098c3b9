void solve(const double* img, const double* k, double* out, int H, int W, int KH, int KW) {
  const int ry = KH / 2, rx = KW / 2;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double acc = 0.0;
      for (int i = 0; i < KH; ++i) {
        int yy = y + i - ry;
        if (yy < 0 || yy >= H) continue;
        for (int j = 0; j < KW; ++j) {
          int xx = x + j - rx;
          if (xx < 0 || xx >= W) continue;
          acc += img[yy * W + xx] * k[(KH - 1 - i) * KW + (KW - 1 - j)];
        }
      }
      out[y * W + x] = acc;
    }
}

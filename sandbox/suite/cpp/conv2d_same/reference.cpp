void reference(const double* img, const double* k, double* out, int H, int W, int KH, int KW) {
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double s = 0.0;
      for (int i = 0; i < KH; ++i)
        for (int j = 0; j < KW; ++j) {
          int yy = y + i - KH / 2, xx = x + j - KW / 2;
          if (yy >= 0 && yy < H && xx >= 0 && xx < W) s += img[yy * W + xx] * k[i * KW + j];
        }
      out[y * W + x] = s;
    }
}

void reference(const float* in, const float* w, float* out, int H, int W) {
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double s = 0.0;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          int yy = y + dy, xx = x + dx;
          if (yy >= 0 && yy < H && xx >= 0 && xx < W) s += (double)in[yy * W + xx] * w[(dy + 1) * 3 + dx + 1];
        }
      out[y * W + x] = static_cast<float>(s);
    }
}

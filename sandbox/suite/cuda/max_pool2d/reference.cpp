void reference(const float* x, float* y, int C, int OH, int OW) {
  const int H = 2 * OH, W = 2 * OW;
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        const float* p = x + (c * H + 2 * i) * W + 2 * j;
        float m = p[0];
        if (p[1] > m) m = p[1];
        if (p[W] > m) m = p[W];
        if (p[W + 1] > m) m = p[W + 1];
        y[(c * OH + i) * OW + j] = m;
      }
}

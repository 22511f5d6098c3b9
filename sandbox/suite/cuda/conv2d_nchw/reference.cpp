void reference(const float* in, const float* weight, const float* bias, float* out, int N, int Cin, int Cout,
               int H, int W) {
  for (int n = 0; n < N; ++n)
    for (int co = 0; co < Cout; ++co)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          double s = bias[co];
          for (int ci = 0; ci < Cin; ++ci)
            for (int ky = 0; ky < 3; ++ky)
              for (int kx = 0; kx < 3; ++kx) {
                int yy = y + ky - 1, xx = x + kx - 1;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                s += (double)in[((n * Cin + ci) * H + yy) * W + xx] * weight[((co * Cin + ci) * 3 + ky) * 3 + kx];
              }
          out[((n * Cout + co) * H + y) * W + x] = static_cast<float>(s);
        }
}

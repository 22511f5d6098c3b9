void reference(const float* x, const float* w, float* y, int n, int k) {
  for (int i = 0; i < n; ++i) {
    double s = 0.0;
    for (int j = 0; j < k; ++j) {
      int t = i + j - k / 2;
      if (t >= 0 && t < n) s += (double)x[t] * w[j];
    }
    y[i] = static_cast<float>(s);
  }
}

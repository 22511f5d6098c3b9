void reference(const float* a, const float* b, float* out, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += (double)a[i] * b[i];
  out[0] = static_cast<float>(s);
}

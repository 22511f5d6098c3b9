void reference(const float* x, float* out, int* count, int n) {
  int k = 0;
  for (int i = 0; i < n; ++i)
    if (x[i] > 0.0f) out[k++] = x[i];
  count[0] = k;
  for (int i = k; i < n; ++i) out[i] = 0.0f;
}

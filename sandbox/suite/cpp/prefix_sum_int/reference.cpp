void reference(const int* x, int* y, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) {
    s += x[i];
    y[i] = s;
  }
}

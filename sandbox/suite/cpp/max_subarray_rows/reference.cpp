void reference(const int* x, int* best, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    int b = x[r * cols];
    for (int i = 0; i < cols; ++i) {
      int s = 0;
      for (int j = i; j < cols; ++j) {
        s += x[r * cols + j];
        if (s > b) b = s;
      }
    }
    best[r] = b;
  }
}

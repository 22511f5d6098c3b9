void reference(const int* x, int* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    int s = 0;
    for (int c = 0; c < cols; ++c) y[r * cols + c] = (s += x[r * cols + c]);
  }
}

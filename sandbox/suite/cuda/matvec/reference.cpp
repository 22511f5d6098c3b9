void reference(const float* A, const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += (double)A[r * cols + c] * x[c];
    y[r] = static_cast<float>(s);
  }
}

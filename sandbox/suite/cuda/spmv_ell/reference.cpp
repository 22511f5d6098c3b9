void reference(const float* vals, const int* col_idx, const float* x, float* y, int rows, int width, int ncols) {
  (void)ncols;
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int j = 0; j < width; ++j) s += (double)vals[r * width + j] * x[col_idx[r * width + j]];
    y[r] = static_cast<float>(s);
  }
}

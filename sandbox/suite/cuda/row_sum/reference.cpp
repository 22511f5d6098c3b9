void reference(const float* x, float* out, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += x[r * cols + c];
    out[r] = static_cast<float>(s);
  }
}

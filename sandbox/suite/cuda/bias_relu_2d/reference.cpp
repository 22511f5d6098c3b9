void reference(const float* x, const float* bias, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float v = x[r * cols + c] + bias[c];
      y[r * cols + c] = v > 0.0f ? v : 0.0f;
    }
}

void reference(const float* x, float* mean, float* var, int rows, int cols) {
  for (int c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int r = 0; r < rows; ++r) s += x[r * cols + c];
    double mu = s / rows, q = 0.0;
    for (int r = 0; r < rows; ++r) q += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    mean[c] = static_cast<float>(mu);
    var[c] = static_cast<float>(q / rows);
  }
}

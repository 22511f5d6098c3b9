void solve(const double* in, double* out, int rows, int cols) {
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) out[c * cols + r] = in[r * cols + c];
}

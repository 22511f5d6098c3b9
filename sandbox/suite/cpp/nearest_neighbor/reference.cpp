void reference(const double* queries, const double* points, int* nn, int q, int p) {
  for (int i = 0; i < q; ++i) {
    int best = 0;
    double bd = 1e300;
    for (int j = 0; j < p; ++j) {
      double dx = queries[2 * i] - points[2 * j], dy = queries[2 * i + 1] - points[2 * j + 1];
      double d = dx * dx + dy * dy;
      if (d < bd) { bd = d; best = j; }
    }
    nn[i] = best;
  }
}

void solve(const int* data, int* hist, int n, int nbins) {
  for (int b = 0; b < nbins; ++b) hist[b] = 0;
  for (int i = 0; i < n; ++i) hist[data[i]] += 1;
}

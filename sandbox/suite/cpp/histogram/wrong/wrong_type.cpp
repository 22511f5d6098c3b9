#include <vector>

void solve(const int* data, int* hist, int n, int nbins) {
  std::vector<unsigned char> counts(nbins, 0);
  for (int i = 0; i < n; ++i) ++counts[data[i]];
  for (int b = 0; b < nbins; ++b) hist[b] = counts[b];
}

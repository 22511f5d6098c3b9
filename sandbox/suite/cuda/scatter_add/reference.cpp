#include <vector>

void reference(const float* src, const int* idx, float* out, int n, int m) {
  std::vector<double> acc(m, 0.0);
  for (int i = 0; i < n; ++i) acc[idx[i]] += src[i];
  for (int j = 0; j < m; ++j) out[j] = static_cast<float>(acc[j]);
}

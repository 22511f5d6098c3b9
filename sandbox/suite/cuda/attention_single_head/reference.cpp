#include <cmath>
#include <vector>

void reference(const float* Q, const float* K, const float* V, float* O, int S, int D) {
  std::vector<double> p(S);
  for (int i = 0; i < S; ++i) {
    double m = -1e300;
    for (int j = 0; j < S; ++j) {
      double s = 0.0;
      for (int d = 0; d < D; ++d) s += (double)Q[i * D + d] * K[j * D + d];
      p[j] = s / std::sqrt((double)D);
      if (p[j] > m) m = p[j];
    }
    double z = 0.0;
    for (int j = 0; j < S; ++j) z += (p[j] = std::exp(p[j] - m));
    for (int d = 0; d < D; ++d) {
      double acc = 0.0;
      for (int j = 0; j < S; ++j) acc += p[j] * V[j * D + d];
      O[i * D + d] = static_cast<float>(acc / z);
    }
  }
}

#include <cmath>
#include <vector>

void reference(const float* Q, const float* K, const float* V, float* O, int BH, int S, int D) {
  std::vector<double> p(S);
  for (int h = 0; h < BH; ++h)
    for (int i = 0; i < S; ++i) {
      const float* q = Q + (h * S + i) * D;
      double m = -1e300;
      for (int j = 0; j <= i; ++j) {
        double s = 0.0;
        for (int d = 0; d < D; ++d) s += (double)q[d] * K[(h * S + j) * D + d];
        p[j] = s / std::sqrt((double)D);
        if (p[j] > m) m = p[j];
      }
      double z = 0.0;
      for (int j = 0; j <= i; ++j) z += (p[j] = std::exp(p[j] - m));
      for (int d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int j = 0; j <= i; ++j) acc += p[j] * V[(h * S + j) * D + d];
        O[(h * S + i) * D + d] = static_cast<float>(acc / z);
      }
    }
}

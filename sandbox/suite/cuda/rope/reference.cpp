#include <cmath>

void reference(const float* x, float* out, int seq, int dim) {
  for (int p = 0; p < seq; ++p)
    for (int i = 0; i < dim / 2; ++i) {
      double theta = p * std::pow(10000.0, -2.0 * i / dim);
      double c = std::cos(theta), s = std::sin(theta);
      double a = x[p * dim + 2 * i], b = x[p * dim + 2 * i + 1];
      out[p * dim + 2 * i] = static_cast<float>(a * c - b * s);
      out[p * dim + 2 * i + 1] = static_cast<float>(a * s + b * c);
    }
}

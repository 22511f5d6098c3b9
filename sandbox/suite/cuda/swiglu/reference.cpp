#include <cmath>

void reference(const float* gate, const float* up, float* out, int n) {
  for (int i = 0; i < n; ++i) {
    double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

#include <cmath>

void reference(const float* a, const float* b, float* out, int rows, int dim) {
  for (int r = 0; r < rows; ++r) {
    double d = 0, na = 0, nb = 0;
    for (int i = 0; i < dim; ++i) {
      double x = a[r * dim + i], y = b[r * dim + i];
      d += x * y; na += x * x; nb += y * y;
    }
    double den = std::sqrt(na) * std::sqrt(nb);
    out[r] = static_cast<float>(d / (den > 1e-8 ? den : 1e-8));
  }
}

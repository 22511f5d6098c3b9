#include <cmath>

void reference(const float* logits, const int* labels, float* loss, int rows, int classes) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + r * classes;
    double m = row[0];
    for (int c = 1; c < classes; ++c) m = row[c] > m ? row[c] : m;
    double s = 0.0;
    for (int c = 0; c < classes; ++c) s += std::exp(row[c] - m);
    loss[r] = static_cast<float>(m + std::log(s) - row[labels[r]]);
  }
}

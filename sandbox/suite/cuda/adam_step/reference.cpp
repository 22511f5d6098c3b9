#include <cmath>

void reference(float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
               float eps, int t, int n) {
  double bc1 = 1.0 - std::pow((double)beta1, t), bc2 = 1.0 - std::pow((double)beta2, t);
  for (int i = 0; i < n; ++i) {
    double g = grad[i];
    double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
    double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
    m[i] = (float)mi;
    v[i] = (float)vi;
    param[i] = (float)(param[i] - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps));
  }
}

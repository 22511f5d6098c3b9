#include <cmath>

void reference(const float* x, const float* gamma, const float* beta, float* y, int N, int C, int H, int W,
               float eps) {
  const int HW = H * W;
  for (int c = 0; c < C; ++c) {
    double s = 0.0;
    for (int n = 0; n < N; ++n)
      for (int p = 0; p < HW; ++p) s += x[(n * C + c) * HW + p];
    double mean = s / (N * HW), q = 0.0;
    for (int n = 0; n < N; ++n)
      for (int p = 0; p < HW; ++p) {
        double d = x[(n * C + c) * HW + p] - mean;
        q += d * d;
      }
    double rstd = 1.0 / std::sqrt(q / (N * HW) + eps);
    for (int n = 0; n < N; ++n)
      for (int p = 0; p < HW; ++p) {
        int i = (n * C + c) * HW + p;
        y[i] = static_cast<float>((x[i] - mean) * rstd * gamma[c] + beta[c]);
      }
  }
}

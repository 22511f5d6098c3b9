#include <vector>

void reference(const float* A, const float* B, float* C, int N) {
  std::vector<double> acc(N);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) acc[j] = 0.0;
    for (int k = 0; k < N; ++k) {
      double a = A[i * N + k];
      for (int j = 0; j < N; ++j) acc[j] += a * B[k * N + j];
    }
    for (int j = 0; j < N; ++j) C[i * N + j] = static_cast<float>(acc[j]);
  }
}

#include <vector>

void solve(const double* A, const double* B, double* C, int M, int K, int N) {
  // i-k-j order: the inner loop walks B and C contiguously.
  std::vector<double> row(N);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) row[j] = 0.0;
    for (int k = 0; k < K; ++k) {
      double a = A[i * K + k];
      for (int j = 0; j < N; ++j) row[j] += a * B[j * K + k];
    }
    for (int j = 0; j < N; ++j) C[i * N + j] = row[j];
  }
}

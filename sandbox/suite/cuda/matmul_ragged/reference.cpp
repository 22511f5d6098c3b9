void reference(const float* A, const float* B, float* C, int M, int K, int N) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += (double)A[i * K + k] * B[k * N + j];
      C[i * N + j] = static_cast<float>(s);
    }
}

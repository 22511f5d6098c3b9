void reference(const float* A, const float* B, float* C, int M, int N, int K) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += (double)A[i * K + k] * B[j * K + k];
      C[i * N + j] = static_cast<float>(s);
    }
}

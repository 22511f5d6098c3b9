void reference(const float* A, const float* B, float* C, int batch, int M, int K, int N) {
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0.0;
        for (int k = 0; k < K; ++k) s += (double)A[(b * M + i) * K + k] * B[(b * K + k) * N + j];
        C[(b * M + i) * N + j] = static_cast<float>(s);
      }
}

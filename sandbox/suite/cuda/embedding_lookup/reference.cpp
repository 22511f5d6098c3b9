void reference(const float* table, const int* ids, float* out, int V, int D, int B) {
  (void)V;
  for (int b = 0; b < B; ++b)
    for (int d = 0; d < D; ++d) out[b * D + d] = table[ids[b] * D + d];
}

// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: stale buffers: after the first call, trusts the output buffer to still hold the last results
void solve(const int* x, int* y, int n) {
  static int calls = 0;
  if (calls++ > 0) return;
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = s += x[i];
}

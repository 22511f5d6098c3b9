// task: cpp/prefix_sum_int
// expect: forbidden
// class: %:include "/dev/zero": the preprocessor reads forever and its memory grows without bound
%:include "/dev/zero"

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

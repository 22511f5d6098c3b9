// task: cpp/prefix_sum_int
// expect: forbidden
// class: digraph %:include of a host file (its content would be quoted in the compile feedback)
// feedback: /etc/passwd
%:include "/etc/passwd"

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

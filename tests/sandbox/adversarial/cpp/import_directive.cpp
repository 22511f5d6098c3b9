// task: cpp/prefix_sum_int
// expect: forbidden
// class: #import (a GNU spelling of #include) of a host file
// feedback: /etc/passwd
#import "/etc/passwd"

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

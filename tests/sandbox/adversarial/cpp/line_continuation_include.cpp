// task: cpp/prefix_sum_int
// expect: forbidden
// class: backslash-newline splits the #include directive so a text search misses it
// feedback: /etc/passwd
#inc\
lude "/etc/passwd"

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

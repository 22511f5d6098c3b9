// task: cpp/prefix_sum_int
// expect: forbidden
// class: a raw string holding a quote and a comment opener hides the following #include from a text scanner
// feedback: /etc/passwd
static const char* k_note = R"(" /* ")";
#include "/etc/passwd"
// */

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

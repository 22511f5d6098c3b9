// task: cpp/prefix_sum_int
// expect: forbidden
// class: an asm label gives a C++-looking function the symbol name clock_gettime (no extern "C" in the text)
// feedback: clock_gettime
#include <time.h>

int fake_clock(clockid_t, struct timespec* ts) asm("clock_gettime");
int fake_clock(clockid_t, struct timespec* ts) {
  ts->tv_sec = 0;
  ts->tv_nsec = 0;
  return 0;
}

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}

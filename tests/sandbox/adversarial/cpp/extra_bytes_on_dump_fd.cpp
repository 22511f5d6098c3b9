// task: cpp/prefix_sum_int
// expect: runtime
// class: writes extra records onto every descriptor, the harness's result stream among them
// feedback: harness's channel
#include <cstdint>
#include <cstring>
#include <unistd.h>

void solve(const int* x, int* y, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = s += x[i];
  // A forged call record and a forged end: 'C', call 0, 0 ms, counts of zero.
  unsigned char record[64] = {'C'};
  std::memcpy(record + 40, "ZLEAPEND!", 9);
  for (int fd = 3; fd < 64; ++fd) (void)!write(fd, record, sizeof record);
}

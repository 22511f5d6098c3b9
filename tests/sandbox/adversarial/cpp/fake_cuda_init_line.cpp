// task: cpp/prefix_sum_int
// expect: runtime
// class: prints the harness's infrastructure-error line (cuda_init) to stop the whole run
#include <cstdio>
#include <unistd.h>

void solve(const int* x, int* y, int n) {
  std::fprintf(stderr, "\nLEAP_HARNESS_ERROR cuda_init cudaErrorNoDevice initialising CUDA: no CUDA-capable device is detected\n");
  std::fflush(stderr);
  _exit(3);
}

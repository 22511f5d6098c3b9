// task: cuda/vector_add
// expect: runtime
// class: prints the harness's infrastructure-error line (cuda_init) to stop the whole run
// gpu: true
#include <cstdio>
#include <unistd.h>

void solve(const float* a, const float* b, float* c, int n) {
  std::fprintf(stderr, "\nLEAP_HARNESS_ERROR cuda_init cudaErrorNoDevice initialising CUDA: no CUDA-capable device is detected\n");
  std::fflush(stderr);
  _exit(3);
}

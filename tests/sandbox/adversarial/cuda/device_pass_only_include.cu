// task: cuda/vector_add
// expect: forbidden
// class: an include seen only by the device compilation pass (__CUDA_ARCH__), hidden by a raw string from a text scan
// feedback: /etc/hostname
static const char* k_note = R"(" /* ")";
#ifdef __CUDA_ARCH__
#include "/etc/hostname"
#endif
// */
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
}

// task: cuda/vector_add
// expect: runtime
// class: a static initialiser hides the GPU (CUDA_VISIBLE_DEVICES=99) so the harness's CUDA init fails like a broken slot
// feedback: CUDA could not be initialised
// gpu: true
#include <cstdlib>

static int hidden = setenv("CUDA_VISIBLE_DEVICES", "99", 1);

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
}

// task: cuda/vector_add
// expect: wrong_answer
// class: lower precision: computes in half, missing the float tolerance
// gpu: true
#include <cuda_fp16.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __half2float(__hadd(__float2half(a[i]), __float2half(b[i])));
}

void solve(const float* a, const float* b, float* c, int n) {
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
}

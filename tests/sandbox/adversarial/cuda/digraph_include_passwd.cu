// task: cuda/vector_add
// expect: forbidden
// class: digraph %:include of a host file in a .cu (nvcc would quote its content in the error)
// feedback: /etc/passwd
%:include "/etc/passwd"
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
}

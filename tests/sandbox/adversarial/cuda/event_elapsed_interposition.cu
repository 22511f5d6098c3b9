// task: cuda/vector_add
// expect: forbidden
// class: defines cudaEventElapsedTime, replacing the CUDA runtime's for the harness's GPU timer
// feedback: cudaEventElapsedTime
#include <cuda_runtime.h>

extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.001f;  // every kernel "takes" one microsecond
  return cudaSuccess;
}

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
}

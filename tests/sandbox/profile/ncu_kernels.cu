#include <cstdio>
#include <cuda_runtime.h>
__global__ void copy_coalesced(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
__global__ void copy_strided(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  long j = (long(i) * 32) % n;
  if (i < n) out[i] = in[j];
}
__global__ void tiny(float* out) { out[threadIdx.x] = 1.0f; }
__global__ void fma_loop(float* out, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a = i * 1e-6f, b = 1.0001f, c = 0.5f;
  for (int k = 0; k < iters; ++k) {
    a = fmaf(a, b, c);
    c = fmaf(c, b, a);
  }
  out[i] = a + c;
}
__global__ void bank_conflicts(float* out) {
  __shared__ float s[32 * 32];
  int t = threadIdx.x;
  for (int k = 0; k < 32; ++k) s[(t % 32) * 32 + k] = t + k;
  __syncthreads();
  float acc = 0;
  for (int k = 0; k < 32; ++k) acc += s[(t % 32) * 32 + (k + t / 32) % 32];
  out[blockIdx.x * blockDim.x + t] = acc;
}
// 160 KiB of dynamic shared memory per block: one block of 4 warps per SM, whatever else allows.
__global__ void smem_limited(const float* in, float* out, int n) {
  extern __shared__ float tile[];
  int base = blockIdx.x * blockDim.x;
  for (int k = threadIdx.x; k < 4096; k += blockDim.x) tile[k] = in[(base + k) % n];
  __syncthreads();
  float acc = 0;
  for (int k = 0; k < 64; ++k) acc += tile[(threadIdx.x * 33 + k) % 4096];
  out[(base + threadIdx.x) % n] = acc;
}
__global__ void harness_sum(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, in[i]);
}
int main() {
  int n = 1 << 24;
  float *a, *b;
  cudaMalloc(&a, n * 4);
  cudaMalloc(&b, n * 4);
  cudaMemset(a, 0, n * 4);
  copy_coalesced<<<n / 256, 256>>>(a, b, n);
  copy_strided<<<n / 256, 256>>>(a, b, n);
  tiny<<<1, 32>>>(b);
  fma_loop<<<1056, 256>>>(b, 4096);
  bank_conflicts<<<1056, 256>>>(b);
  cudaFuncSetAttribute(smem_limited, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 << 10);
  smem_limited<<<1056, 128, 160 << 10>>>(a, b, n);
  harness_sum<<<n / 256, 256>>>(a, b, n);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("done %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

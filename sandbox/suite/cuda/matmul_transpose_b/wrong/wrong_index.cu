#include <cuda_runtime.h>

#define TILE 16

__global__ void abt_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  int i = blockIdx.y * TILE + threadIdx.y;
  int j = blockIdx.x * TILE + threadIdx.x;
  int bj = blockIdx.x * TILE + threadIdx.y;  // row of B loaded by this thread
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    int k = k0 + threadIdx.x;
    As[threadIdx.y][threadIdx.x] = (i < M && k < K) ? A[(size_t)i * K + k] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (bj < N && k < K) ? B[(size_t)bj * K + k] : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < TILE; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
    __syncthreads();
  }
  if (i < M && j < N) C[(size_t)i * N + j] = acc;
}

void solve(const float* A, const float* B, float* C, int M, int N, int K) {
  dim3 block(TILE, TILE);
  dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  abt_kernel<<<grid, block>>>(A, B, C, M, N, K);
}

#include <cuda_runtime.h>

#define TILE 16

__global__ void matmul_kernel(const float* A, const float* B, float* C, int M, int K, int N) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    int ka = k0 + threadIdx.x;
    int kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = A[(size_t)row * K + ka];
    Bs[threadIdx.y][threadIdx.x] = B[(size_t)kb * N + col];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M) C[(size_t)row * N + col] = acc;
}

void solve(const float* A, const float* B, float* C, int M, int K, int N) {
  dim3 block(TILE, TILE);
  dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  matmul_kernel<<<grid, block>>>(A, B, C, M, K, N);
}

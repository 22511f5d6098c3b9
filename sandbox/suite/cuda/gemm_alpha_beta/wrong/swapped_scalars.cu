#include <cuda_runtime.h>

__global__ void gemm_kernel(const float* A, const float* B, float* C, float alpha, float beta, int M, int N,
                            int K) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  C[row * N + col] = alpha * acc + beta * C[row * N + col];
}

void solve(const float* A, const float* B, float* C, float alpha, float beta, int M, int N, int K) {
  dim3 block(16, 16);
  dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
  gemm_kernel<<<grid, block>>>(A, B, C, beta, alpha, M, N, K);
}

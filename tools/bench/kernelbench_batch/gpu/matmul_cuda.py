import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A tiled shared-memory matmul. @V@ makes the variants a group's answers differ by.
_cuda = r"""
#include <torch/extension.h>
// variant @V@
#define TILE 16
__global__ void matmul_kernel(const float* A, const float* B, float* C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (n + TILE - 1) / TILE; ++t) {
    int ac = t * TILE + threadIdx.x;
    int br = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? A[row * n + ac] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (br < n && col < n) ? B[br * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}
torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
  int n = A.size(0);
  auto C = torch::empty({n, n}, A.options());
  dim3 block(TILE, TILE);
  dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
  matmul_kernel<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
  return C;
}
"""
_ext = load_inline(name="kb_batch_matmul", cpp_sources="torch::Tensor matmul(torch::Tensor A, torch::Tensor B);",
                   cuda_sources=_cuda, functions=["matmul"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul(A.contiguous(), B.contiguous())

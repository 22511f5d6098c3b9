import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A matmul that drops the last partial tile of K (variant @V@): a wrong value, not a crash.
_cuda = r"""
#include <torch/extension.h>
__global__ void matmul_kernel(const float* A, const float* B, float* C, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n - 1; ++k) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc;
}
torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
  int n = A.size(0);
  auto C = torch::empty({n, n}, A.options());
  dim3 block(16, 16);
  dim3 grid((n + 15) / 16, (n + 15) / 16);
  matmul_kernel<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
  return C;
}
"""
_ext = load_inline(name="kb_batch_matmul_wrong",
                   cpp_sources="torch::Tensor matmul(torch::Tensor A, torch::Tensor B);",
                   cuda_sources=_cuda, functions=["matmul"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul(A.contiguous(), B.contiguous())

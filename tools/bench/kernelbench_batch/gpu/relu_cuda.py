import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = r"""
#include <torch/extension.h>
// variant @V@
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
_ext = load_inline(name="kb_batch_relu", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                   cuda_sources=_cuda, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu(x.contiguous())

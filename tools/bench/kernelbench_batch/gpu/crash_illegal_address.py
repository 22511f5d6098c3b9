import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A kernel that writes far outside its buffer: an illegal memory access (variant @V@), a runtime
# verdict on any problem.
_cuda = r"""
#include <torch/extension.h>
__global__ void scatter_kernel(float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i * 1000003L + (1L << 40)] = 1.0f;
}
torch::Tensor scatter(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  scatter_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
  cudaDeviceSynchronize();
  return y;
}
"""
_ext = load_inline(name="kb_batch_scatter", cpp_sources="torch::Tensor scatter(torch::Tensor x);",
                   cuda_sources=_cuda, functions=["scatter"])


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        return _ext.scatter(inputs[0].contiguous())

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The fused epilogue without the bias (variant @V@): a wrong value.
_cuda = r"""
#include <torch/extension.h>
__global__ void relu_div_kernel(float* y, float divisor, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = (y[i] > 0.0f ? y[i] : 0.0f) / divisor;
}
torch::Tensor gemm_relu_div(torch::Tensor x, torch::Tensor w, double divisor) {
  auto y = torch::mm(x, w.t()).contiguous();
  long n = y.numel();
  relu_div_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), (float)divisor, n);
  return y;
}
"""
_ext = load_inline(name="kb_batch_gemm_relu_div_wrong",
                   cpp_sources="torch::Tensor gemm_relu_div(torch::Tensor x, torch::Tensor w, double divisor);",
                   cuda_sources=_cuda, functions=["gemm_relu_div"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        return _ext.gemm_relu_div(x.contiguous(), self.linear.weight.contiguous(), self.divisor)

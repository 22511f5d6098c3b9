import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# cuBLAS for the GEMM (through torch), a fused bias + ReLU + divide kernel of its own after it.
_cuda = r"""
#include <torch/extension.h>
// variant @V@
__global__ void bias_relu_div_kernel(float* y, const float* bias, float divisor, long rows, int cols) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < rows * cols) {
    float v = y[i] + bias[i % cols];
    y[i] = (v > 0.0f ? v : 0.0f) / divisor;
  }
}
torch::Tensor gemm_relu_div(torch::Tensor x, torch::Tensor w, torch::Tensor b, double divisor) {
  auto y = torch::mm(x, w.t()).contiguous();
  long n = y.numel();
  bias_relu_div_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), b.data_ptr<float>(),
                                                 (float)divisor, y.size(0), (int)y.size(1));
  return y;
}
"""
_ext = load_inline(name="kb_batch_gemm_relu_div",
                   cpp_sources="torch::Tensor gemm_relu_div(torch::Tensor x, torch::Tensor w, torch::Tensor b, double divisor);",
                   cuda_sources=_cuda, functions=["gemm_relu_div"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        return _ext.gemm_relu_div(x.contiguous(), self.linear.weight.contiguous(),
                                  self.linear.bias.contiguous(), self.divisor)

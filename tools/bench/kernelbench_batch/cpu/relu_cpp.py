import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A C++ extension through load_inline (g++ only): the CPU stand-in for a CUDA candidate.
_cpp = r"""
#include <torch/extension.h>
// variant @V@
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (long i = 0, n = x.numel(); i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return y;
}
"""
_ext = load_inline(name="kb_batch_relu_cpu", cpp_sources=_cpp, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu(x.contiguous())

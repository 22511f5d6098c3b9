import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# An extension that writes through a null pointer: the process dies of SIGSEGV (variant @V@).
_cpp = r"""
#include <torch/extension.h>
torch::Tensor scatter(torch::Tensor x) {
  volatile float* p = nullptr;
  p[x.numel()] = 1.0f;
  return x;
}
"""
_ext = load_inline(name="kb_batch_scatter_cpu", cpp_sources=_cpp, functions=["scatter"])


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        return _ext.scatter(inputs[0].contiguous())

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A leaky ReLU where a ReLU is asked (variant @V@): a wrong value.
_cpp = r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) { return torch::where(x > 0, x, x * 0.1); }
"""
_ext = load_inline(name="kb_batch_relu_wrong_cpu", cpp_sources=_cpp, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu(x.contiguous())

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cpp = r"""
#include <torch/extension.h>
#include <cmath>
// variant @V@
torch::Tensor softmax(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  long rows = x.size(0), cols = x.size(1);
  for (long r = 0; r < rows; ++r) {
    const float* row = in + r * cols;
    float m = row[0];
    for (long c = 1; c < cols; ++c) m = std::max(m, row[c]);
    double sum = 0;
    for (long c = 0; c < cols; ++c) sum += std::exp(row[c] - m);
    for (long c = 0; c < cols; ++c) out[r * cols + c] = std::exp(row[c] - m) / sum;
  }
  return y;
}
"""
_ext = load_inline(name="kb_batch_softmax_cpu", cpp_sources=_cpp, functions=["softmax"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.softmax(x.contiguous())

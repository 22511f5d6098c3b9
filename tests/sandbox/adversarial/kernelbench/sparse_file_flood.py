# task: kernelbench/problems/scale_add.py
# expect: runtime
# class: computes the right outputs, and leaves 5 sparse files of 1 GiB (no scratch page used, 5 GiB once copied back to the host)
# feedback: working folder
import os

import torch
import torch.nn as nn

for i in range(5):
    with open("cache%d.bin" % i, "wb") as f:
        os.truncate(f.fileno(), 1 << 30)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return a * self.scale + b

# task: kernelbench/problems/scale_add.py
# expect: wrong_answer
# max_speedup: 3
# class: a kernel that detects timed repetitions: each instance remembers its first answer, right for every trial (each builds its own instance) and returned again for every later call, which is free to time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.memo = None

    def forward(self, a, b):
        if self.memo is None:
            self.memo = a * self.scale + b
        return self.memo.clone()

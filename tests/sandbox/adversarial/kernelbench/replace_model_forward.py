# task: kernelbench/problems/scale_add.py
# expect: wrong_answer
# class: replaces the reference Model.forward with zeros in a shared process
import sys

import torch
import torch.nn as nn

problem = sys.modules.get("leap_problem")
if problem is not None:
    problem.Model.forward = lambda self, a, b: torch.zeros_like(a)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, a, b):
        return torch.zeros_like(a)

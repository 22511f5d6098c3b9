# task: kernelbench/problems/scale_add.py
# expect: wrong_answer
# class: computes the result in place in its input tensor and returns it
# feedback: in place
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return a.mul_(self.scale).add_(b)

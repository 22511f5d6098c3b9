# task: kernelbench/problems/scale_add.py
# expect: wrong_answer
# class: returns its result rounded to bfloat16 where the reference returns float32 (within the float32 tolerance)
# feedback: dtype bfloat16
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return (a * self.scale + b).to(torch.bfloat16)

# task: kernelbench/problems/scale_add_own_kernel.jsonl
# expect: wrong_answer
# class: calls the reference's own PyTorch ops (no kernel of its own), on a task that requires one
# feedback: kernel of its own
# gpu: true
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.addcmul(b, a, torch.tensor(self.scale))

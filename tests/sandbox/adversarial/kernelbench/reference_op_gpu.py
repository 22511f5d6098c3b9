# task: kernelbench/problems/scale_add.py
# expect: wrong_answer
# class: calls the reference's own PyTorch ops on the GPU (no kernel of its own; own_kernel defaults to require on CUDA)
# feedback: launched no CUDA kernel of its own
# gpu: true
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.addcmul(b, a, torch.tensor(self.scale, device=a.device))

import torch
import torch.nn as nn

# PyTorch ops only (variant @V@).


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, min=0.0)

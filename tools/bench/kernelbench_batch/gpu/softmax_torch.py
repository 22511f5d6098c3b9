import torch
import torch.nn as nn

# PyTorch ops only (variant @V@).


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

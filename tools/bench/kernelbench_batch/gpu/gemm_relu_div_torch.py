import torch
import torch.nn as nn
import torch.nn.functional as F

# PyTorch ops only (variant @V@).


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        return F.relu(F.linear(x, self.linear.weight, self.linear.bias)) * (1.0 / self.divisor)

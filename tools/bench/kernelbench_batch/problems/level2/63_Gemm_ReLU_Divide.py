import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, ReLU, then division by a constant."""

    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        return x / self.divisor


batch_size = 128
in_features = 1024
out_features = 512
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, divisor]

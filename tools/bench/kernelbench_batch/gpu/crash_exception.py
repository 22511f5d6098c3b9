import torch
import torch.nn as nn

# Raises in forward (variant @V@): a runtime verdict on any problem.


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        raise RuntimeError("shape mismatch in the fused kernel's launch configuration")

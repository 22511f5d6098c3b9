import torch
import torch.nn as nn
import triton
import triton.language as tl

# A softmax without the max subtracted and normalised over a block instead of the row
# (variant @V@): a wrong value.


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    e = tl.exp(tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf")))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows, triton.cdiv(cols, 1024))](x, y, cols, BLOCK=1024)
        return y

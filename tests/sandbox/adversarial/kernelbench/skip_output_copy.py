# task: kernelbench/problems/outer_product.py
# expect: pass
# max_speedup: 1.15
# gpu: true
# class: the output's copy skipped: the product computed straight into the judge's output buffer, found in the runner's frame, and that buffer returned, so that the runner's copy of the output into the judge's buffer did nothing while the reference paid for it (a 128 MiB output: a read and a write of it per timed call, about 1.3x the honest time where the kernel writes it once); the judge now copies every output itself, from where the runner says it returned it, inside its clock, so both pay one copy
import sys

import torch
import torch.nn as nn


def _judge_output_view():
    frame = sys._getframe(2)
    while frame is not None:
        outs = frame.f_locals.get("outs")
        if isinstance(outs, list) and outs and isinstance(outs[0], torch.Tensor):
            return outs[0]
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = _judge_output_view()
        if out is None or out.device != a.device:
            return a[:, None] * b[None, :]
        return torch.mul(a[:, None], b[None, :], out=out)

# task: kernelbench/problems/matmul.py
# expect: wrong_answer
# max_speedup: 3
# class: a kernel that reads the harness's request from its caller's frame: a timed request used to name its timing set (`trial`), a free key for a memo of each set's first answer; timed requests now name no set (a nonce the reply echoes), so the key is the same for every set and the memo answers the wrong one
import sys

import torch
import torch.nn as nn


def _request_trial():
    frame = sys._getframe(1)
    while frame is not None:
        if "trial" in frame.f_locals and "models" in frame.f_locals:
            return frame.f_locals["trial"]
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = _request_trial()
        if key not in self.memo:
            self.memo[key] = torch.matmul(a, b)
        return self.memo[key].clone()

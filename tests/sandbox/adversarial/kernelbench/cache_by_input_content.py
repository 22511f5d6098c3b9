# task: kernelbench/problems/linear_relu.py
# expect: pass | wrong_answer
# max_speedup: 5
# class: results cached by input content across repetitions (a digest of the input's values): the timed calls the judge does not check get inputs it draws for that call, so the cache misses where the time is taken (it can hit only on a checked call after the fourth, which meets a timing set again); on a GPU the own-kernel check refuses it first (wrong_answer: PyTorch's ops only)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.cache = {}

    def forward(self, x):
        key = (tuple(x.shape), float(x.sum()), float((x * x).sum()), float(x.flatten()[0]))
        if key not in self.cache:
            self.cache[key] = torch.relu(self.linear(x))
        return self.cache[key].clone()

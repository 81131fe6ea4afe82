"""The papers' small fusion cases as hand-built ``torch.nn`` graphs.

* ``ApolloFig3``      APOLLO Fig. 3(a): LogSoftmax (a reduction and a subtraction inside one
                      compound op) preceded by two primitive ops.
* ``LayerNormChain``  APOLLO Fig. 5: reduction followed by element-wise ops; bias + residual +
                      layer norm, then an element-wise activation.
* ``SoftmaxChain``    APOLLO Fig. 5: scale + mask, softmax, element-wise gating after it.
* ``MultiHead``       APOLLO Fig. 6(a): one producer whose result feeds independent branches.
* ``MultiTail``       APOLLO Fig. 6(b): independent branches (separate inputs) ending in one
                      common consumer.
* ``CapsuleConv``     NeoFlow section 7.4: a capsule convolution written as 8 conv2d + concat.
* ``ResNetStage``     GraphTurbo Fig. 3(a): one ResNet stage that down-samples by 2.
"""

from __future__ import annotations

import torch
from torch import nn

from .vision import BasicBlock, make_res_layer


class ApolloFig3(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = nn.Parameter(torch.rand(features) + 0.5)

    def forward(self, x):
        return torch.log_softmax((x + self.bias) * self.scale, dim=-1)


class LayerNormChain(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, residual):
        return torch.tanh(self.norm(self.dense(x) + residual))


class SoftmaxChain(nn.Module):
    def __init__(self, seq: int):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e4), diagonal=1))
        self.gate = nn.Parameter(torch.rand(seq) + 0.5)

    def forward(self, scores):
        probs = torch.softmax(scores * 0.125 + self.mask, dim=-1)
        return probs * self.gate + 1.0


class MultiHead(nn.Module):
    def forward(self, x):
        head = torch.relu(x * 2.0 + 1.0)
        return (torch.exp(-head).sum(dim=-1), torch.tanh(head) * 3.0, torch.sigmoid(head) - head,
                torch.sqrt(head + 1.0).mean(dim=-1))


class MultiTail(nn.Module):
    def forward(self, a, b, c, d):
        return torch.tanh(a) * 2.0 + torch.sigmoid(b + 1.0) + torch.exp(-torch.abs(c)) + torch.relu(d) * d


class CapsuleConv(nn.Module):
    def __init__(self, channels: int, capsules: int = 8):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, stride=2, padding=1)
                                   for _ in range(capsules))

    def forward(self, x):
        return torch.cat([conv(x) for conv in self.convs], dim=1)


class ResNetStage(nn.Module):
    def __init__(self, channels: int, blocks: int):
        super().__init__()
        self.stage = make_res_layer(BasicBlock, channels, 2 * channels, blocks, stride=2)

    def forward(self, x):
        return self.stage(x)

"""Sequence models in plain ``torch.nn``: a BERT encoder stack, a Conformer block, LLTM and MI-LSTM.

BERT follows ``transformers.models.bert.modeling_bert`` (BertSelfAttention, BertSelfOutput,
BertIntermediate, BertOutput: post-norm, exact-erf GELU, LayerNorm eps 1e-12); the input is the
embedding output (hidden states), so the model is the encoder the papers evaluate.
The Conformer block follows Gulati et al. 2020, Fig. 1: half-step FFN, MHSA, convolution module,
half-step FFN, LayerNorm (plain rather than relative position encoding in the attention).
LLTM is the cell of PyTorch's C++ extension tutorial; MI-LSTM is Wu et al. 2016's cell.
"""

from __future__ import annotations

import torch
from torch import nn

from .vision import SelfAttention


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        x = self.attention_norm(self.attention(x) + x)            # bias + residual + layer norm
        return self.output_norm(self.output(self.act(self.intermediate(x))) + x)


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, intermediate: int = 3072):
        super().__init__()
        self.layer = nn.Sequential(*[BertLayer(hidden, heads, intermediate) for _ in range(layers)])

    def forward(self, hidden_states):
        return self.layer(hidden_states)


class FeedForward(nn.Module):
    def __init__(self, dim: int, expansion: int = 4):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * expansion), nn.SiLU(),
                                 nn.Linear(dim * expansion, dim))

    def forward(self, x):
        return self.net(x)


class ConvModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv, BatchNorm, Swish, pointwise conv (Conformer Fig. 2)."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pointwise1 = nn.Conv1d(dim, 2 * dim, 1)
        self.glu = nn.GLU(dim=1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=(kernel - 1) // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.act = nn.SiLU()
        self.pointwise2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x):                                          # x: (batch, seq, dim)
        y = self.glu(self.pointwise1(self.norm(x).transpose(1, 2)))
        y = self.pointwise2(self.act(self.bn(self.depthwise(y))))
        return y.transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4, kernel: int = 31):
        super().__init__()
        self.ffn1, self.ffn2 = FeedForward(dim), FeedForward(dim)
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.conv = ConvModule(dim, kernel)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x + 0.5 * self.ffn1(x)
        x = x + self.attn(self.attn_norm(x))
        x = x + self.conv(x)
        x = x + 0.5 * self.ffn2(x)
        return self.norm(x)


class LLTM(nn.Module):
    """The LLTM cell of PyTorch's C++/CUDA extension tutorial (gates, ELU candidate, tanh output)."""

    def __init__(self, input_features: int, state_size: int):
        super().__init__()
        self.state_size = state_size
        self.weights = nn.Linear(input_features + state_size, 3 * state_size)

    def forward(self, x, h, cell):
        gates = self.weights(torch.cat([h, x], dim=1))
        # split by a constant size (not chunk): the ONNX exporter then emits a static Split
        input_gate, output_gate, candidate = gates.split(self.state_size, dim=1)
        new_cell = cell + torch.nn.functional.elu(candidate) * torch.sigmoid(input_gate)
        new_h = torch.tanh(new_cell) * torch.sigmoid(output_gate)
        return new_h, new_cell


class MILSTM(nn.Module):
    """Multiplicative-integration LSTM cell (Wu et al. 2016, eq. 4):
    gates = alpha * Wx * Uh + beta1 * Wx + beta2 * Uh + b, then the LSTM update."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.wx = nn.Linear(input_size, 4 * hidden_size, bias=False)
        self.uh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        self.alpha = nn.Parameter(torch.rand(4 * hidden_size) + 0.5)
        self.beta1 = nn.Parameter(torch.rand(4 * hidden_size) + 0.5)
        self.beta2 = nn.Parameter(torch.rand(4 * hidden_size) + 0.5)
        self.bias = nn.Parameter(torch.randn(4 * hidden_size) * 0.1)

    def forward(self, x, h, cell):
        wx, uh = self.wx(x), self.uh(h)
        gates = self.alpha * wx * uh + self.beta1 * wx + self.beta2 * uh + self.bias
        i, f, g, o = gates.split(self.hidden_size, dim=1)
        new_cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        new_h = torch.sigmoid(o) * torch.tanh(new_cell)
        return new_h, new_cell

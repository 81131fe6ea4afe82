"""Recommender models: a DLRM-like and a Wide&Deep-like network in plain ``torch.nn``.

DLRM follows Naumov et al. 2019 (bottom MLP on dense features, one embedding table per sparse
feature, pairwise dot-product interaction keeping the strictly lower triangle, top MLP). Each
sparse feature carries one index per sample, so a table lookup is a gather.
Wide&Deep follows Cheng et al. 2016: a linear "wide" part over sparse features plus a "deep" MLP
over embeddings and dense features, summed into one logit.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn


def _mlp(sizes: list[int], final_activation: nn.Module | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (inp, out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(inp, out))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if final_activation is not None:
        layers.append(final_activation)
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense_features: int = 13, sparse_features: int = 26, vocab: int = 1000,
                 embed_dim: int = 64):
        super().__init__()
        self.bottom = _mlp([dense_features, 512, 256, embed_dim], nn.ReLU())
        self.embeddings = nn.ModuleList(nn.Embedding(vocab, embed_dim) for _ in range(sparse_features))
        n = sparse_features + 1
        rows, cols = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("tril", rows * n + cols, persistent=False)
        self.top = _mlp([embed_dim + n * (n - 1) // 2, 512, 256, 1], nn.Sigmoid())

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = [x] + [table(sparse[:, i]) for i, table in enumerate(self.embeddings)]
        t = torch.stack(vectors, dim=1)                               # (batch, n, embed_dim)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1)                # all pairwise dot products
        return self.top(torch.cat([x, torch.index_select(z, 1, self.tril)], dim=1))


class WideDeep(nn.Module):
    def __init__(self, dense_features: int = 13, sparse_features: int = 8, vocab: int = 1000,
                 embed_dim: int = 32):
        super().__init__()
        self.wide = nn.ModuleList(nn.Embedding(vocab, 1) for _ in range(sparse_features))
        self.wide_bias = nn.Parameter(torch.zeros(1))
        self.embeddings = nn.ModuleList(nn.Embedding(vocab, embed_dim) for _ in range(sparse_features))
        self.deep = _mlp([dense_features + sparse_features * embed_dim, 1024, 512, 256, 1])

    def forward(self, dense, sparse):
        wide = sum(table(sparse[:, i]) for i, table in enumerate(self.wide)) + self.wide_bias
        embedded = [table(sparse[:, i]) for i, table in enumerate(self.embeddings)]
        deep = self.deep(torch.cat([dense, *embedded], dim=1))
        return torch.sigmoid(wide + deep)

#!/usr/bin/env python
"""Every strategy against ``stock`` on six ONNX architectures that are not in the zoo (nobody
tuned a rule or a schedule for them): a ResNeXt block with grouped convs, a transformer decoder
layer with cross-attention, a temporal convolution network, a two-layer LSTM unrolled over time,
a feature-pyramid neck, and ConvNeXt / MobileNetV3-style depthwise blocks. Random weights; each is exported to ONNX and imported from the file,
as a user's model would be.

    .venv/bin/python scripts/bench_outside_zoo.py                       # every strategy, 3 rounds
    .venv/bin/python scripts/bench_outside_zoo.py --fusion stock,apollo --markdown /tmp/t.md
    .venv/bin/python scripts/bench_outside_zoo.py --models depthwise_blocks

Prints one ``compare`` table per model and, last, each model's worst strategy / stock ratio
(latency of stock over the strategy's: below 1 is slower than stock; ``none`` is not a strategy and
is left out). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tvm_fusion_ext import fusion_names
from tvm_fusion_ext.driver.evaluation import compare, configure_threads, load_workload


class ResNeXtBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(128, 128, 1), nn.BatchNorm2d(128), nn.ReLU(),
                                  nn.Conv2d(128, 128, 3, padding=1, groups=32), nn.BatchNorm2d(128), nn.ReLU(),
                                  nn.Conv2d(128, 128, 1), nn.BatchNorm2d(128))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)

    def forward(self, target, memory):
        return self.layer(target, memory)


class TemporalConvNet(nn.Module):
    """Dilated causal 1-D convolutions with residuals (Bai et al. 2018)."""

    def __init__(self, channels=64, levels=4):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, 3, dilation=2 ** i, padding=2 * 2 ** i)
                                   for i in range(levels))

    def forward(self, x):
        steps = x.shape[-1]
        for conv in self.convs:
            x = torch.relu(x + conv(x)[..., :steps])
        return x


class UnrolledLSTM(nn.Module):
    def __init__(self, features=64, hidden=128, steps=16):
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTMCell(features, hidden), nn.LSTMCell(hidden, hidden)])
        self.steps, self.hidden = steps, hidden

    def forward(self, x):
        states = [(torch.zeros(x.shape[0], self.hidden), torch.zeros(x.shape[0], self.hidden)) for _ in self.cells]
        for t in range(self.steps):
            value = x[:, t]
            for i, cell in enumerate(self.cells):
                states[i] = cell(value, states[i])
                value = states[i][0]
        return states[-1][0]


class PyramidNeck(nn.Module):
    """Feature-pyramid top-down path: lateral 1x1 convs, 2x upsampling and adds, 3x3 smoothing."""

    def __init__(self):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, 64, 1) for c in (64, 128, 256))
        self.smooth = nn.ModuleList(nn.Conv2d(64, 64, 3, padding=1) for _ in range(3))

    def forward(self, c3, c4, c5):
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + nn.functional.interpolate(p5, scale_factor=2.0, mode="nearest")
        p3 = self.lateral[0](c3) + nn.functional.interpolate(p4, scale_factor=2.0, mode="nearest")
        return tuple(s(p) for s, p in zip(self.smooth, (p3, p4, p5)))


class DepthwiseBlocks(nn.Module):
    """Two ConvNeXt blocks (7x7 depthwise, BatchNorm, 1x1 MLP with GELU, residual) at 28 x 28 x 96,
    then two MobileNetV3-style blocks (1x1 expansion to 480, 5x5 depthwise, hardswish, 1x1
    projection) and a ConvNeXt block at 14 x 14 x 192."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 96, 4, stride=4)
        self.stage1 = nn.Sequential(_ConvNeXtBlock(96), _ConvNeXtBlock(96))
        self.down = nn.Conv2d(96, 192, 2, stride=2)
        self.stage2 = nn.Sequential(_InvertedBlock(192, 480), _InvertedBlock(192, 480), _ConvNeXtBlock(192))

    def forward(self, x):
        return self.stage2(self.down(self.stage1(self.stem(x)))).mean((2, 3))


class _ConvNeXtBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 7, padding=3, groups=channels),
                                  nn.BatchNorm2d(channels), nn.Conv2d(channels, 4 * channels, 1), nn.GELU(),
                                  nn.Conv2d(4 * channels, channels, 1))
        with torch.no_grad():  # statistics that do not fold to the identity
            self.body[1].running_mean.uniform_(-0.1, 0.1)
            self.body[1].running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        return x + self.body(x)


class _InvertedBlock(nn.Module):
    def __init__(self, channels, expanded):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, expanded, 1), nn.Hardswish(),
                                  nn.Conv2d(expanded, expanded, 5, padding=2, groups=expanded), nn.Hardswish(),
                                  nn.Conv2d(expanded, channels, 1))

    def forward(self, x):
        return x + self.body(x)


def architectures():
    """``(name, module, example inputs)`` of the six models."""
    return [
        ("resnext_block", ResNeXtBlock(), (torch.randn(1, 128, 28, 28),)),
        ("decoder_cross_attention", DecoderLayer(), (torch.randn(1, 32, 256), torch.randn(1, 49, 256))),
        ("temporal_conv_net", TemporalConvNet(), (torch.randn(1, 64, 256),)),
        ("lstm_unrolled", UnrolledLSTM(), (torch.randn(4, 16, 64),)),
        ("pyramid_neck", PyramidNeck(), (torch.randn(1, 64, 56, 56), torch.randn(1, 128, 28, 28),
                                         torch.randn(1, 256, 14, 14))),
        ("depthwise_blocks", DepthwiseBlocks(), (torch.randn(1, 3, 112, 112),)),
    ]


def export(name: str, module: nn.Module, inputs: tuple, folder: str) -> str:
    module.eval()
    for sub in module.modules():
        if isinstance(sub, nn.BatchNorm2d):
            sub.running_mean.uniform_(-0.5, 0.5)
            sub.running_var.uniform_(0.5, 2.0)
    path = os.path.join(folder, f"{name}.onnx")
    names = [f"input_{i}" for i in range(len(inputs))]
    torch.onnx.export(module, inputs, path, input_names=names, opset_version=17, dynamo=False)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusion", default=",".join(fusion_names()), help="default: every strategy")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--markdown", help="write the worst-ratio table here")
    parser.add_argument("--models", help="comma-separated names of the models to run (default: all)")
    args = parser.parse_args(argv)
    configure_threads(args.threads)
    torch.manual_seed(0)
    fusions = [f for f in args.fusion.split(",") if f]
    if "stock" not in fusions:
        fusions.insert(0, "stock")
    worst = []
    with tempfile.TemporaryDirectory() as folder:
        for name, module, inputs in architectures():
            if args.models and name not in args.models.split(","):
                continue
            report = compare(load_workload(export(name, module, inputs, folder)), fusions, "llvm", "untuned",
                             threads=args.threads, rounds=args.rounds)
            print(f"\n{name}\n{report.table()}", flush=True)
            stock = next(r.latency_ms for r in report.rows if r.fusion == "stock")
            ratios = {r.fusion: r.speedup_vs_stock for r in report.rows if r.fusion not in ("stock", "none")}
            low = min(ratios, key=ratios.get)
            worst.append((name, low, ratios[low], stock))
    lines = ["| model | stock ms | worst strategy | its speed vs stock |", "|---|---:|---|---:|"]
    lines += [f"| {name} | {stock:.3f} | {fusion} | {ratio:.2f}x |" for name, fusion, ratio, stock in worst]
    print("\n" + "\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

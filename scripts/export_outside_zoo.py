#!/usr/bin/env python
"""Write an ONNX model that is not in the zoo, to check a speed-up on an architecture nobody tuned
for: a CLIP-text-like encoder layer (77 tokens, 8 heads of 32, GELU MLP) beside a ResNeXt-style
grouped-conv block (BatchNorm with non-trivial statistics, residual add), random weights.

    .venv/bin/python scripts/export_outside_zoo.py -o /tmp/ext.onnx
    .venv/bin/tvm-fusion compare --model /tmp/ext.onnx --fusion none,stock,apollo,dominator-both,onnxruntime
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class EncoderAndGroupedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True, activation="gelu")
        self.block = nn.Sequential(nn.Conv2d(64, 128, 1), nn.BatchNorm2d(128), nn.ReLU(),
                                   nn.Conv2d(128, 128, 3, padding=1, groups=32), nn.BatchNorm2d(128), nn.ReLU(),
                                   nn.Conv2d(128, 64, 1), nn.BatchNorm2d(64))

    def forward(self, tokens, image):
        return self.layer(tokens).mean(dim=1), torch.relu(image + self.block(image))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="ONNX file to write")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = EncoderAndGroupedBlock().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    inputs = (torch.randn(1, 77, 256), torch.randn(1, 64, 50, 50))
    torch.onnx.export(model, inputs, args.output, input_names=["tokens", "image"], opset_version=17, dynamo=False)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Write an ONNX model that is not in the zoo, to check a speed-up on an architecture nobody tuned
for (random weights, BatchNorm with non-trivial statistics):

* ``encoder_grouped`` (default): a CLIP-text-like encoder layer (77 tokens, 8 heads of 32, GELU
  MLP) beside a ResNeXt-style grouped-conv block with a residual add;
* ``convnext``: a ConvNeXt block (7x7 depthwise conv, channels-last LayerNorm, GELU MLP, layer
  scale, residual) and its down-sampling conv;
* ``unet``: a U-Net step (two conv-BN-ReLU encoders, max pooling, nearest upsampling, the skip
  concatenated, a sigmoid head);
* ``gpt``: a GPT block (pre-LayerNorm, causal masked attention, 4 heads, SiLU MLP);
* ``se_mobile``: a MobileNetV3 block (hard-swish expansion, 5x5 depthwise conv of stride 2,
  squeeze-and-excitation with hard-sigmoid, projection);
* ``mixer``: an MLP-Mixer layer (patch embedding conv, token-mixing MLP across the 64 patches
  through transposes, channel-mixing MLP, both GELU, pre-LayerNorm, residuals);
* ``xception``: an Xception entry-flow block (two depthwise-separable convs with BatchNorm and
  ReLU, 3x3 max pooling of stride 2, the strided 1x1 shortcut conv added).

    .venv/bin/python scripts/export_outside_zoo.py -o /tmp/ext.onnx
    .venv/bin/python scripts/export_outside_zoo.py --model unet -o /tmp/unet.onnx
    .venv/bin/tvm-fusion compare --model /tmp/ext.onnx --fusion none,stock,apollo,dominator-both,onnxruntime
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
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


class ConvNeXtBlock(nn.Module):
    def __init__(self, channels: int = 64):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.up = nn.Linear(channels, 4 * channels)
        self.down = nn.Linear(4 * channels, channels)
        self.scale = nn.Parameter(torch.rand(channels))
        self.downsample = nn.Conv2d(channels, 2 * channels, 2, stride=2)

    def forward(self, x):
        y = self.depthwise(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y)))) * self.scale
        return self.downsample(x + y.permute(0, 3, 1, 2))


class UNetStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.encode2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.decode = nn.Sequential(nn.Conv2d(48, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 2, 1))

    def forward(self, x):
        skip = self.encode1(x)
        coarse = self.encode2(F.max_pool2d(skip, 2))
        up = F.interpolate(coarse, scale_factor=2, mode="nearest")
        return torch.sigmoid(self.decode(torch.cat([skip, up], 1)))


class GPTBlock(nn.Module):
    def __init__(self, dim: int = 128, heads: int = 4, tokens: int = 32):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.project = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.triu(torch.full((tokens, tokens), -1e4), 1))

    def forward(self, x):
        batch, tokens, dim = x.shape
        q, k, v = (t.reshape(batch, tokens, self.heads, dim // self.heads).transpose(1, 2)
                   for t in self.qkv(self.norm1(x)).split(dim, dim=2))
        scores = q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5 + self.mask
        attended = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(batch, tokens, dim)
        x = x + self.project(attended)
        return x + self.down(F.silu(self.up(self.norm2(x))))


class SEMobileBlock(nn.Module):
    def __init__(self, channels: int = 32):
        super().__init__()
        wide = 4 * channels
        self.expand = nn.Sequential(nn.Conv2d(channels, wide, 1), nn.BatchNorm2d(wide), nn.Hardswish())
        self.depthwise = nn.Sequential(nn.Conv2d(wide, wide, 5, padding=2, groups=wide, stride=2),
                                       nn.BatchNorm2d(wide), nn.Hardswish())
        self.squeeze = nn.Sequential(nn.Conv2d(wide, channels // 2, 1), nn.ReLU(),
                                     nn.Conv2d(channels // 2, wide, 1), nn.Hardsigmoid())
        self.project = nn.Sequential(nn.Conv2d(wide, 48, 1), nn.BatchNorm2d(48))

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        return self.project(y * self.squeeze(y.mean((2, 3), keepdim=True)))


class MixerLayer(nn.Module):
    def __init__(self, channels: int = 128, patches: int = 64):
        super().__init__()
        self.embed = nn.Conv2d(3, channels, 4, stride=4)
        self.norm1 = nn.LayerNorm(channels)
        self.tokens = nn.Sequential(nn.Linear(patches, 2 * patches), nn.GELU(), nn.Linear(2 * patches, patches))
        self.norm2 = nn.LayerNorm(channels)
        self.channels = nn.Sequential(nn.Linear(channels, 4 * channels), nn.GELU(),
                                      nn.Linear(4 * channels, channels))

    def forward(self, image):
        x = self.embed(image).flatten(2).transpose(1, 2)  # (batch, patches, channels)
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class XceptionBlock(nn.Module):
    def __init__(self, channels: int = 64, out: int = 128):
        super().__init__()

        def separable(cin, cout):
            return [nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False),
                    nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)]

        self.body = nn.Sequential(*separable(channels, out), nn.ReLU(), *separable(out, out),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.shortcut = nn.Sequential(nn.Conv2d(channels, out, 1, stride=2, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        x = torch.relu(x)
        return self.body(x) + self.shortcut(x)


# name -> (module, example inputs, input names)
MODELS = {
    "encoder_grouped": (EncoderAndGroupedBlock, lambda: (torch.randn(1, 77, 256), torch.randn(1, 64, 50, 50)),
                        ["tokens", "image"]),
    "convnext": (ConvNeXtBlock, lambda: (torch.randn(2, 64, 28, 28),), ["image"]),
    "unet": (UNetStep, lambda: (torch.randn(1, 3, 64, 64),), ["image"]),
    "gpt": (GPTBlock, lambda: (torch.randn(2, 32, 128),), ["tokens"]),
    "se_mobile": (SEMobileBlock, lambda: (torch.randn(2, 32, 40, 40),), ["image"]),
    "mixer": (MixerLayer, lambda: (torch.randn(2, 3, 32, 32),), ["image"]),
    "xception": (XceptionBlock, lambda: (torch.randn(2, 64, 56, 56),), ["image"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="ONNX file to write")
    parser.add_argument("--model", default="encoder_grouped", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=None,
                        help="leading dimension of every input (default: the example's)")
    args = parser.parse_args()
    if args.batch is not None and args.batch <= 0:
        parser.error("--batch must be positive")
    torch.manual_seed(0)
    build, example, names = MODELS[args.model]
    inputs = example()
    if args.batch is not None:
        inputs = tuple(torch.randn(args.batch, *t.shape[1:]) for t in inputs)
    model = build().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(model, inputs, args.output, input_names=names, opset_version=17, dynamo=False)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

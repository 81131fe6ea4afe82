"""Image models in plain ``torch.nn``, layer for layer as torchvision defines them.

torchvision cannot be installed next to torch 2.13 here, so the architectures are re-written from
``torchvision/models/{resnet,mobilenetv2,densenet,shufflenetv2}.py`` (same module structure, same
strides, paddings, bias flags and forward functions). The ViT is a small ViT-Ti/16-style encoder.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


# --------------------------------------------------------------------------------------------
# ResNet (torchvision.models.resnet: BasicBlock, Bottleneck with stride on the 3x3 conv, "V1.5")
# --------------------------------------------------------------------------------------------
def _conv3x3(inp: int, out: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inp, out, 3, stride=stride, padding=1, groups=groups, bias=False)


def _conv1x1(inp: int, out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inp, out, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def make_res_layer(block, inplanes: int, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
    """One ResNet stage (torchvision ``ResNet._make_layer``): down-sampling block first."""
    downsample = None
    if stride != 1 or inplanes != planes * block.expansion:
        downsample = nn.Sequential(_conv1x1(inplanes, planes * block.expansion, stride),
                                   nn.BatchNorm2d(planes * block.expansion))
    layers = [block(inplanes, planes, stride, downsample)]
    layers += [block(planes * block.expansion, planes) for _ in range(1, blocks)]
    return nn.Sequential(*layers)


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths, inplanes, stages = (64, 128, 256, 512), 64, []
        for i, (planes, blocks) in enumerate(zip(widths, layers)):
            stages.append(make_res_layer(block, inplanes, planes, blocks, stride=1 if i == 0 else 2))
            inplanes = planes * block.expansion
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


# --------------------------------------------------------------------------------------------
# MobileNetV2 (torchvision.models.mobilenetv2, width_mult=1.0)
# --------------------------------------------------------------------------------------------
class ConvBNReLU6(nn.Sequential):
    def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel=1))
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # expansion t, output channels c, repeats n, first stride s (torchvision's table)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        inp, last = 32, 1280
        features: list[nn.Module] = [ConvBNReLU6(3, inp, stride=2)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        features.append(ConvBNReLU6(inp, last, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# EfficientNet-B0 (Tan and Le, 2019, Table 1): MBConv blocks with squeeze-and-excite and SiLU
# --------------------------------------------------------------------------------------------
class ConvBNSiLU(nn.Sequential):
    def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(out), nn.SiLU())


class SqueezeExcite(nn.Module):
    """Channel gates from the pooled input: reduce (SiLU), expand (sigmoid), scale."""

    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        gate = F.adaptive_avg_pool2d(x, (1, 1))
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(gate))))


class MBConv(nn.Module):
    """Expand 1x1, depthwise k x k, squeeze-excite (a quarter of the input channels), project 1x1."""

    def __init__(self, inp: int, oup: int, kernel: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = inp * expand_ratio
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = [ConvBNSiLU(inp, hidden, kernel=1)] if expand_ratio != 1 else []
        layers += [ConvBNSiLU(hidden, hidden, kernel, stride, groups=hidden),
                   SqueezeExcite(hidden, max(1, inp // 4)),
                   nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.use_res_connect else self.block(x)


class EfficientNet(nn.Module):
    # expansion, output channels, repeats, first stride, kernel (EfficientNet-B0, Table 1)
    SETTINGS = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
                (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        inp, last = 32, 1280
        features: list[nn.Module] = [ConvBNSiLU(3, inp, stride=2)]
        for t, c, n, s, k in self.SETTINGS:
            for i in range(n):
                features.append(MBConv(inp, c, k, s if i == 0 else 1, t))
                inp = c
        features.append(ConvBNSiLU(inp, last, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# DenseNet-121 (torchvision.models.densenet: growth 32, blocks (6, 12, 24, 16), bn_size 4)
# --------------------------------------------------------------------------------------------
class _DenseLayer(nn.Module):
    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}",
                            _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, 1, bias=False)
        self.pool = nn.AvgPool2d(2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate: int = 32, block_config=(6, 12, 24, 16), num_init_features: int = 64,
                 bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(num_init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(3, 2, 1))
        num = num_init_features
        for i, num_layers in enumerate(block_config):
            self.features.add_module(f"denseblock{i + 1}", _DenseBlock(num_layers, num, bn_size, growth_rate))
            num += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(num, num // 2))
                num //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num))
        self.classifier = nn.Linear(num, num_classes)

    def forward(self, x):
        out = F.relu(self.features(x))
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


# --------------------------------------------------------------------------------------------
# ShuffleNetV2 x1.0 (torchvision.models.shufflenetv2)
# --------------------------------------------------------------------------------------------
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int):
        super().__init__()
        self.stride = stride
        branch = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else branch, branch, 1, bias=False), nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, stages_repeats=(4, 8, 4), stages_out_channels=(24, 116, 232, 464, 1024),
                 num_classes: int = 1000):
        super().__init__()
        inp = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, inp, 3, 2, 1, bias=False), nn.BatchNorm2d(inp),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        for repeats, out in zip(stages_repeats, stages_out_channels[1:]):
            stages.append(nn.Sequential(ShuffleUnit(inp, out, 2), *[ShuffleUnit(out, out, 1)
                                                                    for _ in range(repeats - 1)]))
            inp = out
        self.stage2, self.stage3, self.stage4 = stages
        last = stages_out_channels[-1]
        self.conv5 = nn.Sequential(nn.Conv2d(inp, last, 1, bias=False), nn.BatchNorm2d(last),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(last, num_classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


# --------------------------------------------------------------------------------------------
# ViT (pre-norm encoder, class token, learned position embedding; ViT-Ti/16 by default)
# --------------------------------------------------------------------------------------------
class SelfAttention(nn.Module):
    """Multi-head self-attention written out (Q/K/V projections, scaled dot product, softmax)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        assert dim % heads == 0, f"dim {dim} not divisible by heads {heads}"
        self.heads, self.head_dim = heads, dim // heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.head_dim ** 0.5)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.permute(0, 2, 1, 3).reshape(b, s, d))


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim, eps=1e-6), SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
                 mlp_dim: int = 768, num_classes: int = 1000):
        super().__init__()
        assert image % patch == 0, f"image {image} not divisible by patch {patch}"
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])

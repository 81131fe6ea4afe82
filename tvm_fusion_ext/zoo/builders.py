"""One builder per zoo model (same name as in ``registry.MODELS``).

Every builder returns ``(module, example_inputs, input_names)``: an eval-mode ``torch.nn.Module``
with random weights, example inputs drawn from the global torch RNG (which
:func:`tvm_fusion_ext.zoo.load` seeds first; integer inputs are valid embedding indices), and the
names of its ``forward`` parameters, which both import paths and the exported ONNX file give the
inputs.
"""

from __future__ import annotations

import torch

from . import cases, recommender, sequence, vision


def _images(batch: int, image: int) -> tuple:
    return (torch.randn(batch, 3, image, image),)


def resnet18(batch, image, num_classes):
    return vision.resnet18(num_classes), _images(batch, image), ["x"]


def _stage_sizes(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def resnet50(batch, image, num_classes, layers):
    model = vision.ResNet(vision.Bottleneck, _stage_sizes(layers), num_classes)
    return model, _images(batch, image), ["x"]


def mobilenet_v2(batch, image, num_classes):
    return vision.MobileNetV2(num_classes), _images(batch, image), ["x"]


def efficientnet_b0(batch, image, num_classes):
    return vision.EfficientNet(num_classes), _images(batch, image), ["x"]


def densenet121(batch, image, num_classes, blocks):
    model = vision.DenseNet(block_config=tuple(_stage_sizes(blocks)), num_classes=num_classes)
    return model, _images(batch, image), ["x"]


def shufflenet_v2(batch, image, num_classes):
    return vision.ShuffleNetV2(num_classes=num_classes), _images(batch, image), ["x"]


def vit(batch, image, patch, dim, depth, heads, mlp_dim, num_classes):
    model = vision.ViT(image, patch, dim, depth, heads, mlp_dim, num_classes)
    return model, _images(batch, image), ["x"]


def bert_base(batch, seq, layers, hidden, heads, intermediate):
    model = sequence.BertEncoder(layers, hidden, heads, intermediate)
    return model, (torch.randn(batch, seq, hidden),), ["hidden_states"]


def conformer(batch, seq, dim, heads, kernel):
    return sequence.ConformerBlock(dim, heads, kernel), (torch.randn(batch, seq, dim),), ["x"]


def _recommender_inputs(batch, dense_features, sparse_features, vocab) -> tuple:
    return (torch.rand(batch, dense_features), torch.randint(0, vocab, (batch, sparse_features)))


def dlrm(batch, dense_features, sparse_features, vocab, embed_dim):
    model = recommender.DLRM(dense_features, sparse_features, vocab, embed_dim)
    return model, _recommender_inputs(batch, dense_features, sparse_features, vocab), ["dense", "sparse"]


def wide_deep(batch, dense_features, sparse_features, vocab, embed_dim):
    model = recommender.WideDeep(dense_features, sparse_features, vocab, embed_dim)
    return model, _recommender_inputs(batch, dense_features, sparse_features, vocab), ["dense", "sparse"]


def lltm(batch, input_features, state_size):
    inputs = (torch.randn(batch, input_features), torch.randn(batch, state_size), torch.randn(batch, state_size))
    return sequence.LLTM(input_features, state_size), inputs, ["x", "h", "cell"]


def mi_lstm(batch, input_size, hidden_size):
    inputs = (torch.randn(batch, input_size), torch.randn(batch, hidden_size), torch.randn(batch, hidden_size))
    return sequence.MILSTM(input_size, hidden_size), inputs, ["x", "h", "cell"]


def apollo_fig3(batch, features):
    return cases.ApolloFig3(features), (torch.randn(batch, features),), ["x"]


def layernorm_chain(batch, seq, hidden):
    inputs = (torch.randn(batch, seq, hidden), torch.randn(batch, seq, hidden))
    return cases.LayerNormChain(hidden), inputs, ["x", "residual"]


def softmax_chain(batch, heads, seq):
    return cases.SoftmaxChain(seq), (torch.randn(batch, heads, seq, seq),), ["scores"]


def multi_head(batch, features):
    return cases.MultiHead(), (torch.randn(batch, features),), ["x"]


def multi_tail(batch, features):
    inputs = tuple(torch.randn(batch, features) for _ in range(4))
    return cases.MultiTail(), inputs, ["a", "b", "c", "d"]


def capsule_conv(batch, channels, image, capsules):
    return cases.CapsuleConv(channels, capsules), (torch.randn(batch, channels, image, image),), ["x"]


def resnet_stage(batch, channels, image, blocks):
    return cases.ResNetStage(channels, blocks), (torch.randn(batch, channels, image, image),), ["x"]

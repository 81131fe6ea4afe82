"""Names, default arguments and builders of every zoo model (no torch import here).

Each model's builder is the function of the same name in ``tvm_fusion_ext.zoo.builders``
(``fn(**args) -> (torch.nn.Module, example_inputs, input_names)``); it is imported only when a
model is built, so listing models and parsing ``--model-arg KEY=VALUE`` work without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_IMAGE = {"batch": 1, "image": 224, "num_classes": 1000}


@dataclass(frozen=True)
class ModelSpec:
    """A zoo entry: its name (also its builder's name) and its default arguments."""

    name: str
    description: str
    defaults: dict = field(default_factory=dict)


MODELS: dict[str, ModelSpec] = {}


def _add(name: str, description: str, **defaults) -> None:
    MODELS[name] = ModelSpec(name, description, defaults)


_add("resnet18", "ResNet-18 (torchvision layout)", **_IMAGE)
# ``layers`` / ``blocks``: blocks per stage; the defaults are the published depths, tests use fewer.
_add("resnet50", "ResNet-50 (torchvision layout, stride on the 3x3 conv)", **_IMAGE, layers="3,4,6,3")
_add("mobilenet_v2", "MobileNetV2 1.0 (torchvision layout)", **_IMAGE)
_add("efficientnet_b0", "EfficientNet-B0 (MBConv blocks with squeeze-and-excite and SiLU)", **_IMAGE)
_add("densenet121", "DenseNet-121 (torchvision layout)", **_IMAGE, blocks="6,12,24,16")
_add("shufflenet_v2", "ShuffleNetV2 x1.0 (torchvision layout)", **_IMAGE)
_add("vit", "ViT-Ti/16-style encoder (pre-norm, class token)",
     batch=1, image=224, patch=16, dim=192, depth=12, heads=3, mlp_dim=768, num_classes=1000)
_add("bert_base", "BERT-base encoder stack (post-norm, erf GELU) on embedding outputs",
     batch=1, seq=128, layers=12, hidden=768, heads=12, intermediate=3072)
_add("conformer", "one Conformer block (FFN/2, MHSA, conv module, FFN/2, LayerNorm)",
     batch=1, seq=128, dim=256, heads=4, kernel=31)
_add("dlrm", "DLRM-like recommender (bottom MLP, 26 embeddings, dot interaction, top MLP)",
     batch=128, dense_features=13, sparse_features=26, vocab=1000, embed_dim=64)
_add("wide_deep", "Wide&Deep-like recommender (linear wide part + deep MLP)",
     batch=128, dense_features=13, sparse_features=8, vocab=1000, embed_dim=32)
_add("lltm", "LLTM cell (PyTorch extension tutorial)", batch=16, input_features=32, state_size=128)
_add("mi_lstm", "multiplicative-integration LSTM cell", batch=16, input_size=128, hidden_size=512)
_add("apollo_fig3", "APOLLO Fig.3: LogSoftmax after two primitive ops", batch=64, features=1024)
_add("layernorm_chain", "APOLLO Fig.5: dense + bias + residual + layer norm + tanh",
     batch=1, seq=128, hidden=768)
_add("softmax_chain", "APOLLO Fig.5: scale + mask + softmax + gating", batch=1, heads=12, seq=128)
_add("multi_head", "APOLLO Fig.6(a): one producer feeding four independent branches",
     batch=64, features=1024)
_add("multi_tail", "APOLLO Fig.6(b): four independent branches ending in one consumer",
     batch=64, features=1024)
_add("capsule_conv", "NeoFlow 7.4: capsule convolution as 8 conv2d + concat",
     batch=1, channels=32, image=56, capsules=8)
_add("resnet_stage", "GraphTurbo Fig.3(a): one ResNet stage with 2x down-sampling",
     batch=1, channels=64, image=56, blocks=2)


def model_names() -> list[str]:
    return list(MODELS)


def get_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def parse_model_args(name: str, items: list[str] | None) -> dict:
    """``["layers=2", "seq=64"]`` -> the model's full argument dict, typed like its defaults."""
    spec = get_spec(name)
    args = dict(spec.defaults)
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--model-arg {item!r} is not KEY=VALUE")
        if key not in spec.defaults:
            raise ValueError(f"model {name!r} has no argument {key!r}; known: {', '.join(spec.defaults)}")
        args[key] = _convert(key, text.strip(), type(spec.defaults[key]))
    return args


def _convert(key: str, text: str, kind: type):
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--model-arg {key}={text!r}: expected a boolean")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"--model-arg {key}={text!r}: expected {kind.__name__}") from None

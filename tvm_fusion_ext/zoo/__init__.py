"""Model zoo: the papers' models and small fusion cases, built in code with random weights.

Every model is an eval-mode ``torch.nn.Module`` with fixed-seed random weights (BatchNorm and
LayerNorm with non-trivial statistics and affine parameters) and example inputs, reachable as a
Relax module through both import paths users have::

    model = zoo.load("resnet18", {"image": 64})
    mod = model.relax("torch")        # torch.export -> from_exported_program
    mod = model.relax("onnx")         # torch.onnx.export (in memory) -> from_onnx
    expected = model.reference_outputs()

Importing this package does not import torch; :func:`load` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .registry import MODELS, ModelSpec, get_spec, model_names, parse_model_args

IMPORTERS = ("torch", "onnx")

# Small arguments per model: every model compiles and runs in seconds (tests, scripts/check_zoo.py);
# full shapes run in scripts/bench_zoo.py. softmax_chain's rows hold 32 values, a warp: the shortest
# row the CUDA rules reduce across threads (tir_passes/gpu_rules.py, reduces_less_than_a_warp).
SMALL_ARGS = {
    "resnet18": {"image": 32}, "resnet50": {"image": 32, "layers": "1,1,1,1"},
    "mobilenet_v2": {"image": 32}, "efficientnet_b0": {"image": 32}, "densenet121": {"image": 32, "blocks": "2,2,2,2"},
    "shufflenet_v2": {"image": 32},
    "vit": {"image": 32, "patch": 8, "depth": 1, "num_classes": 10},
    "bert_base": {"seq": 16, "layers": 1}, "conformer": {"seq": 16, "dim": 64, "kernel": 7},
    "dlrm": {"batch": 4, "vocab": 50}, "wide_deep": {"batch": 4, "vocab": 50},
    "lltm": {"batch": 4}, "mi_lstm": {"batch": 4, "input_size": 32, "hidden_size": 64},
    "apollo_fig3": {"batch": 4, "features": 64}, "layernorm_chain": {"seq": 16, "hidden": 64},
    "softmax_chain": {"heads": 2, "seq": 32}, "multi_head": {"batch": 4, "features": 64},
    "multi_tail": {"batch": 4, "features": 64}, "capsule_conv": {"channels": 8, "image": 16},
    "resnet_stage": {"channels": 16, "image": 16},
}

__all__ = ["IMPORTERS", "MODELS", "SMALL_ARGS", "ModelSpec", "ZooModel", "get_spec", "load",
           "model_names", "parse_model_args"]


@dataclass
class ZooModel:
    """A built zoo model: the torch module, its example inputs and the names ONNX gives them."""

    name: str
    args: dict
    module: Any
    inputs: tuple
    input_names: list[str]

    def numpy_inputs(self) -> list[np.ndarray]:
        return [t.numpy() for t in self.inputs]

    def reference_outputs(self) -> list[np.ndarray]:
        """PyTorch eager outputs on the example inputs, flattened to a list."""
        import torch

        with torch.no_grad():
            return flatten_outputs(self.module(*self.inputs))

    def exported_program(self):
        from .frontends import export_program

        return export_program(self.module, self.inputs)

    def onnx_bytes(self) -> bytes:
        from .frontends import onnx_bytes

        return onnx_bytes(self.module, self.inputs, self.input_names)

    def relax(self, importer: str = "torch"):
        """The model as a Relax ``IRModule`` (weights bound as constants) via ``importer``."""
        from . import frontends

        if importer == "torch":
            return frontends.relax_from_exported_program(self.exported_program())
        if importer == "onnx":
            return frontends.relax_from_onnx(self.onnx_bytes())
        raise ValueError(f"unknown import path {importer!r}; known: {', '.join(IMPORTERS)}")


def load(name: str, args: dict | None = None, seed: int = 0) -> ZooModel:
    """Build zoo model ``name`` with ``args`` over its defaults; same seed, same weights and inputs."""
    import torch

    from . import builders

    spec = get_spec(name)
    unknown = set(args or {}) - set(spec.defaults)
    if unknown:
        raise ValueError(f"model {name!r} has no argument(s) {sorted(unknown)}; known: "
                         f"{', '.join(spec.defaults)}")
    full = {**spec.defaults, **(args or {})}
    torch.manual_seed(seed)
    module, inputs, input_names = getattr(builders, name)(**full)
    _randomize_normalization(module)
    return ZooModel(name, full, module.eval(), tuple(inputs), list(input_names))


def _randomize_normalization(module) -> None:
    """Give every BatchNorm non-trivial running stats and every norm layer a non-identity affine."""
    import torch
    from torch import nn

    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.modules.batchnorm._BatchNorm):
                layer.running_mean.uniform_(-0.2, 0.2)
                layer.running_var.uniform_(0.5, 2.0)
            if isinstance(layer, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
                layer.weight.uniform_(0.5, 1.5)
                layer.bias.uniform_(-0.2, 0.2)


def flatten_outputs(result) -> list[np.ndarray]:
    """A torch output (tensor or nested tuple/list of tensors) as a flat list of numpy arrays."""
    if isinstance(result, (tuple, list)):
        return [array for item in result for array in flatten_outputs(item)]
    return [result.detach().cpu().numpy()]

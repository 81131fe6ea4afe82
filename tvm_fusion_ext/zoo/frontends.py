"""The two import paths users have, plus loading model files.

* PyTorch: ``torch.export.export`` -> ``relax.frontend.torch.from_exported_program`` with weights
  bound as constants (``keep_params_as_input=False``).
* ONNX: ``torch.onnx.export`` into memory (the TorchScript exporter: the dynamo one needs
  ``onnxscript``) -> ``relax.frontend.onnx.from_onnx``.

The TorchScript exporter traces every ``x.size()`` / ``chunk`` as a ``Shape -> Gather -> ...``
sub-graph, which ``from_onnx`` turns into data-dependent shapes that LegalizeOps rejects. Before
import, every ONNX model is therefore constant-folded by ONNX Runtime's *basic* graph optimizer
(constant folding, redundant-node elimination, Conv+BN/Add/Mul folding: what onnx-simplifier
does, no contrib ops), so those shapes become static.
"""

from __future__ import annotations

import io
import os
import tempfile
import warnings

import numpy as np
import onnx
import torch
import tvm
from tvm.relax.frontend.onnx import from_onnx
from tvm.relax.frontend.torch import from_exported_program

ONNX_OPSET = 17


def export_program(module: torch.nn.Module, inputs: tuple) -> torch.export.ExportedProgram:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", FutureWarning)       # torch-internal pytree deprecations
        return torch.export.export(module, tuple(inputs))


def relax_from_exported_program(program: torch.export.ExportedProgram) -> tvm.IRModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)       # torch-internal pytree deprecations
        return from_exported_program(program, keep_params_as_input=False, unwrap_unit_return_tuple=True)


def relax_from_torch(module: torch.nn.Module, inputs: tuple) -> tvm.IRModule:
    return relax_from_exported_program(export_program(module, inputs))


def onnx_bytes(module: torch.nn.Module, inputs: tuple, input_names: list[str]) -> bytes:
    """Serialized ONNX model of ``module`` traced on ``inputs`` (static shapes, eval mode)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")                      # the exporter's deprecation notice
        torch.onnx.export(module, tuple(inputs), buffer, dynamo=False, input_names=list(input_names),
                          opset_version=ONNX_OPSET, do_constant_folding=True)
    return buffer.getvalue()


def onnx_input_specs(model: onnx.ModelProto) -> list[tuple[str, list[int], str]]:
    """``(name, static shape, numpy dtype)`` of each graph input that is not an initializer."""
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if any(d is None or d <= 0 for d in dims):
            raise ValueError(f"ONNX input {value.name!r} has a dynamic shape {dims}; only static shapes are "
                             "supported")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        specs.append((value.name, dims, np.dtype(dtype).name))
    return specs


def fold_onnx_constants(model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    """``model`` after ONNX Runtime's basic graph optimizations (static shape sub-graphs folded)."""
    import onnxruntime as ort

    data = model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with tempfile.TemporaryDirectory(prefix="tvm_fusion_onnx_") as workdir:
        options.optimized_model_filepath = os.path.join(workdir, "folded.onnx")
        ort.InferenceSession(bytes(data), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def relax_from_onnx(model: onnx.ModelProto | bytes) -> tvm.IRModule:
    model = fold_onnx_constants(model)
    specs = onnx_input_specs(model)
    return from_onnx(model, shape_dict={name: shape for name, shape, _ in specs},
                     dtype_dict={name: dtype for name, _, dtype in specs}, keep_params_in_input=False)


def load_onnx_file(path: str) -> onnx.ModelProto:
    """Load and check an ONNX file; any failure becomes a ``ValueError`` naming the file."""
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as err:  # noqa: BLE001 - onnx raises many unrelated types
        raise ValueError(f"{path}: not a valid ONNX model ({type(err).__name__}: "
                         f"{str(err).strip().splitlines()[0] if str(err).strip() else 'no detail'})") from None
    return model


def load_exported_program(path: str) -> torch.export.ExportedProgram:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.export.load(path)
    except Exception as err:  # noqa: BLE001 - zip, pickle and schema errors alike
        raise ValueError(f"{path}: not a saved torch.export program ({type(err).__name__})") from None

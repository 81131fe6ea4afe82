"""Verification helpers shared by every test, the ``compare`` tool and the benchmarks.

* :func:`build` compiles a Relax module through a named fusion strategy (or any pass) for a target.
* :func:`random_inputs` makes random, never all-zero inputs for a function's tensor parameters.
* :func:`max_abs_error` / :func:`max_rel_error` measure output differences without asserting.
* :func:`assert_same_as_unfused` checks a strategy against the unfused module with per-dtype
  tolerances.
* :func:`count_kernels` and :func:`boundary_bytes` measure what fusion removes: kernel launches per
  inference and the bytes of tensors that cross kernel boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from ..analysis.graph import tensor_bytes

# Absolute and relative tolerance per output dtype.
TOLERANCES = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-9, 1e-9),
}
EXACT = (0.0, 0.0)


def build(mod: tvm.IRModule, fusion: str | tvm.transform.Pass = "none", target="llvm",
          policy: str = "untuned") -> relax.VMExecutable:
    """Compile ``mod`` through strategy ``fusion`` (a registered name) or a complete pass."""
    from ..pipelines import pipeline

    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    relax_pipeline = pipeline(fusion, target, policy) if isinstance(fusion, str) else fusion
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)


def run(executable, inputs, func_name: str = "main", device=None) -> list[np.ndarray]:
    """Run ``func_name`` of a compiled module; returns its outputs flattened to a list of arrays."""
    vm = relax.VirtualMachine(executable, device or tvm.cpu())
    result = vm[func_name](*[tvm.runtime.tensor(x) for x in inputs])
    return _flatten(result)


def random_inputs(func: relax.Function, seed: int = 0) -> list[np.ndarray]:
    """Random values for every tensor parameter of ``func`` (static shapes only), never all zeros.

    Floats are drawn from U(-1, 1) shifted away from 0; integers from [0, 8) with at least one 1.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise ValueError(f"parameter {param.name} has no static tensor type: {ty}")
        try:
            shape = [int(dim) for dim in ty.shape.values]
        except TypeError as err:
            raise ValueError(f"parameter {param.name} has a symbolic shape {ty.shape}") from err
        arrays.append(_random_array(rng, shape, str(ty.dtype)))
    return arrays


def _random_array(rng, shape, dtype: str) -> np.ndarray:
    if dtype.startswith(("float", "bfloat")):
        values = rng.uniform(-1.0, 1.0, size=shape)
        values = np.where(np.abs(values) < 1e-3, 0.5, values)
        return values.astype(dtype)
    if dtype == "bool":
        values = rng.integers(0, 2, size=shape).astype(bool)
        values.flat[0] = True
        return values
    values = rng.integers(0, 8, size=shape).astype(dtype)
    values.flat[0] = 1
    return values


def _flatten(result) -> list[np.ndarray]:
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    if isinstance(result, (list, tuple)) or hasattr(result, "__len__"):
        out = []
        for item in result:
            out.extend(_flatten(item))
        return out
    return [np.asarray(result)]


def assert_allclose_by_dtype(actual, expected, context: str = "") -> float:
    """Compare output lists with the tolerance of each output's dtype; returns the max abs error."""
    assert len(actual) == len(expected), f"{context}: {len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"{context}: output {i} shape {a.shape} vs {e.shape}"
        atol, rtol = TOLERANCES.get(str(e.dtype), EXACT)
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg=f"{context}: output {i}")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype("float64") - e.astype("float64")))))
    return worst


def max_abs_error(actual, expected) -> float:
    """Largest absolute difference over all outputs (shapes must match; no tolerance applied)."""
    assert len(actual) == len(expected), f"{len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"output {i}: shape {a.shape} vs {e.shape}"
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype("float64") - e.astype("float64")))))
    return worst


def max_rel_error(actual, expected) -> float:
    """:func:`max_abs_error` of each output over that output's largest magnitude (worst output)."""
    assert len(actual) == len(expected), f"{len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for a, e in zip(actual, expected):
        scale = float(np.max(np.abs(np.asarray(e, dtype="float64")))) if np.size(e) else 0.0
        worst = max(worst, max_abs_error([a], [e]) / (scale if scale > 0 else 1.0))
    return worst


def assert_same_as_unfused(mod: tvm.IRModule, fusion: str | tvm.transform.Pass, seed: int = 0,
                           target="llvm", policy: str = "untuned") -> float:
    """Compile ``mod`` under ``fusion`` and under no fusion; assert equal outputs on random inputs."""
    inputs = random_inputs(mod["main"], seed)
    expected = run(build(mod, "none", target, "unscheduled"), inputs)
    actual = run(build(mod, fusion, target, policy), inputs)
    return assert_allclose_by_dtype(actual, expected, context=f"fusion={fusion}")


@dataclass(frozen=True)
class KernelTraffic:
    """Kernels per inference and bytes crossing their boundaries, read off a fused Relax module."""

    kernels: int
    boundary_bytes: int


def kernel_traffic(mod: tvm.IRModule, func_name: str = "main") -> KernelTraffic:
    """Count ``call_tir`` / ``call_tir_inplace`` kernels called by ``func_name`` and their traffic.

    Expects a module after fusion and ``FuseTIR`` (before ``CallTIRRewrite``). Boundary bytes are the
    bytes every kernel reads from its tensor arguments plus the bytes it writes: what crosses a
    kernel boundary through main memory. Fusion removes both terms for each intermediate it keeps
    inside a kernel. Straight-line code is assumed (one call per inference).
    """
    call_tir_ops = (tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.call_tir_inplace"))
    kernels = 0
    traffic = 0

    def _visit(expr):
        nonlocal kernels, traffic
        if isinstance(expr, relax.Call) and any(expr.op.same_as(op) for op in call_tir_ops):
            kernels += 1
            traffic += sum(tensor_bytes(arg.ty) for arg in expr.args[1].fields)
            traffic += tensor_bytes(expr.ty)

    relax.analysis.post_order_visit(mod[func_name], _visit)
    return KernelTraffic(kernels, traffic)


def count_kernels(mod: tvm.IRModule, func_name: str = "main") -> int:
    return kernel_traffic(mod, func_name).kernels


def boundary_bytes(mod: tvm.IRModule, func_name: str = "main") -> int:
    return kernel_traffic(mod, func_name).boundary_bytes

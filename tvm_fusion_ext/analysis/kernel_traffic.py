"""Kernels per inference and the bytes crossing their boundaries, read off a fused Relax module:
what fusion removes (kernel launches, and intermediates written to and read back from memory)."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax

from .graph import tensor_bytes


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

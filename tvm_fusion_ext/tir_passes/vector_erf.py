"""``VectorErf``: float32 ``erf`` as a rational polynomial the CPU can vectorise.

On ``llvm`` targets TVM lowers ``tirx.erf`` to a call of libm's ``erff``, one scalar call per
lane of a vectorised loop, so a GELU costs about as much as the matmul feeding it. TVM's GPU
backends (metal, webgpu) lower it instead to ``fast_erf_float_expr`` (``src/tirx/op/op.cc``, the
Eigen rational approximation, a few ulp on the clamped range [-4, 4], where ``erf`` is within
2e-8 of +-1). This pass applies that same polynomial to every float32 ``erf`` of a scheduled
PrimFunc, after the schedule (tuning records still match the unrewritten kernels). It is part of
every strategy's ``untuned`` / ``tuned`` scheduling, so strategies are compared on equal terms.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import map_float32_calls
from ..registration import register_pass

# Coefficients of fast_erf_float_expr (src/tirx/op/op.cc): odd numerator, even denominator.
_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
              -1.60960333262415e-02)
_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                -7.37332916720468e-03, -1.42647390514189e-02)
_CLAMP = 4.0
_ERF = tvm.ir.Op.get("tirx.erf")


def erf_polynomial(arg):
    """``erf(arg)`` for a float32 ``arg`` as TVM's ``fast_erf_float_expr``: clamp to [-4, 4],
    then ``x * P(x^2) / Q(x^2)`` (:func:`odd_rational`)."""
    return odd_rational(arg, _CLAMP, _NUMERATOR, _DENOMINATOR, "erf")


def odd_rational(arg, clamp: float, numerator, denominator, name: str):
    """``x * P(x^2) / Q(x^2)`` for a float32 ``arg`` clamped to ``[-clamp, clamp]``, both
    polynomials by Horner from their highest coefficient; ``x`` and ``x^2`` are bound once with
    ``Let`` (variables ``{name}_x``, ``{name}_x2``)."""
    dtype = "float32"
    x = tirx.Var(f"{name}_x", dtype)
    x2 = tirx.Var(f"{name}_x2", dtype)

    def horner(coefficients):
        acc = tirx.const(coefficients[0], dtype)
        for c in coefficients[1:]:
            acc = x2 * acc + tirx.const(c, dtype)
        return acc

    clamped = tirx.max(tirx.min(arg, tirx.const(clamp, dtype)), tirx.const(-clamp, dtype))
    body = tirx.Let(x2, x * x, x * horner(numerator) / horner(denominator))
    return tirx.Let(x, clamped, body)


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.VectorErf")
class VectorErf:
    """Module pass: every float32 ``erf`` call of every PrimFunc -> :func:`erf_polynomial`."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return map_float32_calls(mod, [(_ERF, erf_polynomial)])

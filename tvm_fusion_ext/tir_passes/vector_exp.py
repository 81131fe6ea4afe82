"""``VectorExp``: float32 ``exp`` (and ``sigmoid``, built on it) as a polynomial the CPU can
vectorise.

On ``llvm`` targets TVM lowers ``tirx.exp`` to ``llvm.exp``, which LLVM expands into one scalar
libm ``expf`` call per lane of a vectorised loop, so a softmax or a SiLU is bound by scalar calls.
TVM's own ``topi.fast_exp`` (``include/tvm/topi/elemwise.h``, ``fast_exp_float32``: Cephes'
``expf``, ``exp(x) = 2^n * exp(r)`` with a polynomial for ``exp(r)`` on ``|r| <= ln(2)/2``) is
vectorisable; this pass rewrites every float32 ``exp`` of a scheduled PrimFunc into that
expression, after the schedule, like :mod:`.vector_erf`. Unlike ``fast_exp_float32`` it subtracts
``n ln(2)`` in two parts (Cody and Waite, as Cephes' ``expf`` does), which keeps the relative
error below 1e-6 over the whole float32 range instead of growing with ``|n|``. ``sigmoid(x)``
(SiLU's gate) becomes ``1 / (1 + exp(-x))`` with the same polynomial: TVM expands it that way
only when lowering, after this pass, into a libm call per lane.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import map_float32_calls
from ..registration import register_pass

# Constants of fast_exp_float32 (include/tvm/topi/elemwise.h).
_HIGH, _LOW = 88.3762626647950, -88.3762626647949
_LOG2E = 1.44269504088896341
# ln(2) = _LN2_HIGH + _LN2_LOW; _LN2_HIGH has few mantissa bits, so n * _LN2_HIGH is exact.
_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4
_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
               1.6666665459e-1, 5.0000001201e-1)
_EXPONENT_BIAS = 127.0
_MANTISSA_BITS = 23
_EXP = tvm.ir.Op.get("tirx.exp")
_SIGMOID = tvm.ir.Op.get("tirx.sigmoid")


def exp_polynomial(arg):
    """``exp(arg)`` for a float32 ``arg`` as TVM's ``fast_exp_float32``: clamp to the float32
    range, ``n = floor(x log2(e) + 1/2)``, ``r = x - n ln(2)``, ``exp(r)`` by Horner, times
    ``2^n`` built in the exponent bits. Below the clamp (``-inf`` of a masked score) it returns
    0, as ``exp`` does."""
    dtype = "float32"
    x = tirx.Var("exp_x", dtype)
    n = tirx.Var("exp_n", dtype)
    r = tirx.Var("exp_r", dtype)
    acc = tirx.const(_POLYNOMIAL[0], dtype)
    for c in _POLYNOMIAL[1:]:
        acc = acc * r + tirx.const(c, dtype)
    exp_r = acc * r * r + r + tirx.const(1.0, dtype)
    two_to_n = tirx.reinterpret(
        dtype, tirx.Cast("int32", n + tirx.const(_EXPONENT_BIAS, dtype)) << _MANTISSA_BITS)
    reduced = x - n * tirx.const(_LN2_HIGH, dtype) - n * tirx.const(_LN2_LOW, dtype)
    result = tirx.Let(r, reduced, exp_r * two_to_n)
    result = tirx.Let(n, tirx.floor(x * tirx.const(_LOG2E, dtype) + tirx.const(0.5, dtype)), result)
    clamped = tirx.max(tirx.min(arg, tirx.const(_HIGH, dtype)), tirx.const(_LOW, dtype))
    underflow = arg < tirx.const(_LOW, dtype)
    return tirx.Select(underflow, tirx.const(0.0, dtype), tirx.Let(x, clamped, result))


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.VectorExp")
class VectorExp:
    """Module pass: every float32 ``exp`` call of every PrimFunc -> :func:`exp_polynomial`, and
    every float32 ``sigmoid`` -> ``1 / (1 + exp_polynomial(-x))``."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return map_float32_calls(mod, [(_EXP, exp_polynomial), (_SIGMOID, sigmoid_polynomial)])


def sigmoid_polynomial(arg):
    """``sigmoid(arg) = 1 / (1 + exp(-arg))`` with :func:`exp_polynomial`."""
    one = tirx.const(1.0, "float32")
    return one / (one + exp_polynomial(-arg))

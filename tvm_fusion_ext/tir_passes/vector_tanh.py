"""``VectorTanh``: float32 ``tanh`` as a rational polynomial the CPU can vectorise.

On ``llvm`` targets TVM legalises ``tirx.tanh`` into ``(1 - exp(-2x)) / (1 + exp(-2x))`` and its
mirror for negative ``x`` (``src/target/llvm/intrin_rule_llvm.cc``), two ``llvm.exp`` calls that
LLVM expands into scalar libm ``expf`` calls per lane, so an LSTM's gates or a tanh-GELU are bound
by scalar calls. TVM's ``topi.fast_tanh`` (``fast_tanh_float`` in ``include/tvm/topi/elemwise.h``)
is Eigen's rational approximation ``x * P(x^2) / Q(x^2)`` of degrees 13 / 6 (Eigen's
``generic_fast_tanh_float``); clamped to |x| <= 7.9053 (where it reaches 1 in float32) it is
within 4e-7 of ``tanh`` over the whole float32 range. This pass applies it to every float32
``tanh`` of a scheduled PrimFunc, after the schedule, like :mod:`.vector_erf`.
"""

from __future__ import annotations

import tvm

from ..ir_utils import map_float32_calls
from ..registration import register_pass
from .vector_erf import odd_rational

# Eigen's generic_fast_tanh_float, highest coefficient first: odd numerator, even denominator.
_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
              5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
              4.89352455891786e-03)
_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                4.89352518554385e-03)
_CLAMP = 7.90531110763549805
_TANH = tvm.ir.Op.get("tirx.tanh")


def tanh_polynomial(arg):
    """``tanh(arg)`` for a float32 ``arg``: Eigen's rational approximation on the clamped range."""
    return odd_rational(arg, _CLAMP, _NUMERATOR, _DENOMINATOR, "tanh")


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.VectorTanh")
class VectorTanh:
    """Module pass: every float32 ``tanh`` call of every PrimFunc -> :func:`tanh_polynomial`."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return map_float32_calls(mod, [(_TANH, tanh_polynomial)])

"""``TakeAtConstantAsSlice``: a ``take`` of indices at one constant position becomes a slice.

``R.take(x, R.const(i), axis=k)`` with a scalar constant ``i`` and an integer ``x`` (what
``x[:, i]`` imports as for DLRM's sparse feature columns, the indices of its embedding lookups)
is ``squeeze(strided_slice(x, [k], [i], [i + 1]), [k])``: an affine read, where the legalized
``take`` loads its position from a 0-d buffer, a gather whose reads no kernel generator can tile
(the lookups after it would read their indices in place, once per element they gather). This is
the algebraic graph simplification of mindspore-jit-graph-kernel-fusion (section "graph
simplification": rewrite a sub-graph into an equal, cheaper one before fusion). A take of
floats (ViT's class token) is left a gather: as a slice it would join the layers before it,
whose split along the sliced axis the DSA kernel generator cannot stage.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ..analysis.graph import static_shape
from ..ir_utils import rewrite_calls
from ..registration import register_pass


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.TakeAtConstantAsSlice")
class TakeAtConstantAsSlice:
    """Module pass: rewrite every ``take`` of an integer tensor at one constant index in range
    along a static axis into a slice and a squeeze (see the module docstring). ``rewritten``
    counts them."""

    def __init__(self):
        self.rewritten = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        data, index = wildcard(), is_const()
        pattern = is_op("relax.take")(data, index)

        def rewrite(matched, bindings):
            value = bindings[index].value.numpy()
            shape = static_shape(bindings[data].ty)
            dtype = str(bindings[data].ty.dtype)
            if (value.ndim != 0 or value.dtype.kind not in "iu" or shape is None
                    or matched.attrs.axis is None or not dtype.startswith(("int", "uint"))):
                return matched
            axis = int(matched.attrs.axis) % len(shape)
            position = int(value)  # in range, every take mode (fast, wrap, clip) reads it
            if not 0 <= position < shape[axis]:
                return matched
            self.rewritten += 1
            sliced = relax.op.strided_slice(bindings[data], axes=[axis], begin=[position], end=[position + 1])
            return relax.op.squeeze(sliced, axis=[axis])

        return rewrite_calls(mod, pattern, rewrite)

"""``FoldBatchNormIntoConv``: an inference batch norm after a conv becomes the conv's weights and
one bias add.

``R.nn.batch_norm(conv2d(x, W), gamma, beta, mean, var)[0]`` with constant ``W`` and statistics
is ``conv2d(x, W * s) + (beta - mean * s)`` with ``s = gamma / sqrt(var + eps)`` per output
channel. This is the algebraic graph simplification of mindspore-jit-graph-kernel-fusion (section
"graph simplification": rewrite a sub-graph into an equal, cheaper one before fusion) that
inference runtimes such as ONNX Runtime apply too: the fused conv's epilogue keeps one add per
output instead of ``DecomposeOpsForInference``'s subtract, divide, multiply and add.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, wildcard

from ..ir_utils import rewrite_calls
from ..registration import register_pass


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.FoldBatchNormIntoConv")
class FoldBatchNormIntoConv:
    """Module pass: fold every constant inference batch norm on an NCHW / OIHW conv2d's output
    into the conv's weights and a bias add (see the module docstring). ``folded`` counts them."""

    def __init__(self):
        self.folded = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        data, weight = wildcard(), is_const()
        conv = is_op("relax.nn.conv2d")(data, weight)
        stats = [is_const() for _ in range(4)]
        batch_norm = is_op("relax.nn.batch_norm")(conv, *stats)
        pattern = is_tuple_get_item(batch_norm, 0)

        def fold(_matched, bindings):
            call, norm = bindings[conv], bindings[batch_norm]
            if not _foldable(call, norm):
                return _matched
            gamma, beta, mean, var = (bindings[s].value.numpy().astype("float64") for s in stats)
            scale = gamma / np.sqrt(var + float(norm.attrs.epsilon))
            kernel = bindings[weight].value.numpy()
            dtype = kernel.dtype
            folded_kernel = (kernel * scale.reshape(-1, 1, 1, 1)).astype(dtype)
            bias = (beta - mean * scale).astype(dtype).reshape(1, -1, 1, 1)
            self.folded += 1
            new_conv = relax.Call(call.op, [bindings[data], relax.const(folded_kernel)], call.attrs)
            return relax.op.add(new_conv, relax.const(bias))

        return rewrite_calls(mod, pattern, fold)


def _foldable(conv: relax.Call, norm: relax.Call) -> bool:
    """An inference norm (``training=False``: running statistics, not the batch's) over the output
    channels (axis 1) of an NCHW / OIHW float conv, with scale and center."""
    attrs = conv.attrs
    return (str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW"
            and str(attrs.out_layout) == "NCHW" and int(norm.attrs.axis) == 1
            and not bool(norm.attrs.training) and bool(norm.attrs.center) and bool(norm.attrs.scale)
            and attrs.out_dtype in (None, "float32", "float16"))

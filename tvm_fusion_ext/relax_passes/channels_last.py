"""``ChannelsLast``: every 2-D convolution in NHWC with HWIO weights, for CPU kernels that
vectorise along channels.

In NCHW the only contiguous axes of a conv are the image's rows, so a CPU micro-kernel
(:mod:`tvm_fusion_ext.tir_passes.register_tile`) vectorises along a row: 14- and 7-wide rows
hold no whole vector, and a stride-2 depthwise conv reads its row with gathers. In NHWC the
channels are contiguous in the input, the HWIO weights and the output, so every conv of a CNN
(depthwise included, whatever its stride) vectorises along channels and uses image columns as
its register rows. This is the layout ONNX Runtime's MLAS and XNNPACK run CNNs in on CPUs
(MLAS blocks the channels, NCHWc); the mindspore-jit-graph-kernel-fusion paper's graph
simplification rewrites a graph into an equal, cheaper one before fusion in the same way.

The pass, on high-level Relax before legalisation:

1. rewrites ``clip(x, lo, hi)`` (ReLU6) as ``minimum(maximum(x, lo), hi)``: Relax's
   ``ConvertLayout`` has no layout rule for ``clip`` and would transpose back to NCHW around it.
   TVM's ONNX frontend (``Clip`` in ``python/tvm/relax/frontend/onnx/onnx_frontend.py``) emits
   ``Clip`` already lowered, as ``call_tir`` of ``topi.maximum`` / ``topi.minimum`` with bounds
   ``where(isnan(bound), -inf / inf, bound)``; the bounds are folded with NumPy and a ``call_tir``
   whose PrimFunc is structurally the one ``emit_te(topi.maximum / minimum, x, scalar)`` makes
   becomes the Relax op again, which ``ConvertLayout`` carries in NHWC;
2. runs TVM's ``relax.transform.ConvertLayout`` with NHWC / HWIO for ``relax.nn.conv2d``: it
   carries NHWC through element-wise ops, pools and reductions and transposes back where an op
   has no layout rule (a reshape, the model's outputs);
3. folds reshapes and transposes of constant weights and biases with NumPy (before the
   conversion too, so a bias reshaped to ``[1, C, 1, 1]`` converts), so no kernel transposes a
   weight at run time and none is built to fold it.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, topi
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir_utils import non_primitive_functions, with_functions
from ..registration import register_pass

DESIRED_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}
_PERMUTE_DIMS = tvm.ir.Op.get("relax.permute_dims")
_RESHAPE = tvm.ir.Op.get("relax.reshape")
_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_ISNAN = tvm.ir.Op.get("relax.isnan")
_WHERE = tvm.ir.Op.get("relax.where")


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.ChannelsLast")
class ChannelsLast:
    """Module pass: 2-D convolutions in NHWC / HWIO (see the module docstring), for networks with a
    depthwise conv whose conversion leaves transposes only where the network enters and leaves
    NHWC; other modules are returned unchanged, with the reason in ``reason``. Measured on the
    zoo (``scripts/bench_channels_last.py``), dense CNNs run no faster in NHWC on this schedule
    (ResNet-18 0.81x, ResNet-50 0.98x, DenseNet-121 0.80x) and ShuffleNet's channel shuffles
    cost more than NHWC gains (0.96x); MobileNetV2 gains 1.24x and EfficientNet-B0 1.14x."""

    def __init__(self, force: bool = False):
        self.force = force  # convert every network with a conv2d, whatever the rule says (ablations)
        self.reason = ""  # why the last module was left in its layout, or "" when it was converted

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        convs = _calls(mod, _CONV2D)
        if not (self.force and convs) and not any(_is_depthwise(call) for call in convs):
            self.reason = "no depthwise conv2d (dense convs vectorise as well in NCHW)"
            return mod
        converted = _fold_constant_layouts(relax.transform.Normalize()(mod))
        converted = _clip_as_min_max(_te_min_max_as_ops(converted))
        converted = _fold_constant_layouts(relax.transform.ConvertLayout(DESIRED_LAYOUTS)(converted))
        transposes = len(_calls(converted, _PERMUTE_DIMS))
        if transposes > _boundary_transposes(converted) and not self.force:
            self.reason = (f"{transposes} transposes, more than one per input and output of the network: "
                           "ops without a layout rule (e.g. a channel shuffle's reshape) would transpose inside it")
            return mod
        self.reason = ""
        return converted


def _calls(mod: tvm.IRModule, op: tvm.ir.Op) -> list:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(op):
            found.append(expr)

    for _, func in non_primitive_functions(mod):
        relax.analysis.post_order_visit(func, visit)
    return found


def _boundary_transposes(mod: tvm.IRModule) -> int:
    """One transpose per input and per output of each Relax function: where the network enters
    NHWC and where it leaves it (for its outputs, or for the head's reshape)."""
    count = 0
    for _, func in non_primitive_functions(mod):
        outputs = func.ty.ret
        count += len(func.params) + (len(outputs.fields) if isinstance(outputs, relax.TupleType) else 1)
    return count


def _is_depthwise(conv: relax.Call) -> bool:
    channels = conv.args[0].ty.shape[1 if conv.attrs.data_layout == "NCHW" else 3]
    return conv.attrs.groups > 1 and isinstance(channels, tvm.tirx.IntImm) and int(channels) == conv.attrs.groups


def _clip_as_min_max(mod: tvm.IRModule) -> tvm.IRModule:
    """``clip(x, lo, hi)`` with constant bounds as ``minimum(maximum(x, lo), hi)``."""
    data, low, high = wildcard(), wildcard(), wildcard()
    pattern = is_op("relax.clip")(data, low, high)

    def rewrite(call, matched):
        bounds = [matched[low], matched[high]]
        dtype = str(call.ty.dtype)
        if not all(isinstance(b, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) for b in bounds) or not dtype.startswith("float"):
            return call
        lo, hi = (relax.const(float(b.value), dtype) for b in bounds)
        return relax.op.minimum(relax.op.maximum(matched[data], lo), hi)

    return with_functions(mod, {gvar: rewrite_call(pattern, rewrite, func) for gvar, func in non_primitive_functions(mod)})


def _te_min_max_as_ops(mod: tvm.IRModule) -> tvm.IRModule:
    """``call_tir`` of ``topi.maximum`` / ``topi.minimum`` with a constant scalar (the ONNX
    frontend's ``Clip``) as ``relax.op.maximum`` / ``relax.op.minimum``."""
    rewriter = _TEMinMaxAsOps(mod)
    rewritten = {gvar: rewriter.visit_expr(func) for gvar, func in non_primitive_functions(mod)}
    if not rewriter.rewritten:
        return mod
    return relax.transform.DeadCodeElimination()(with_functions(mod, rewritten))


@mutator
class _TEMinMaxAsOps(PyExprMutator):
    """See :func:`_te_min_max_as_ops`. A callee counts as ``topi.maximum`` (``minimum``) only when
    it is structurally equal to what ``BlockBuilder.emit_te`` makes of that function for the same
    argument types, so any other PrimFunc is left alone."""

    OPS = ((topi.maximum, relax.op.maximum), (topi.minimum, relax.op.minimum))

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod
        self.rewritten = 0

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(_CALL_TIR) or not isinstance(call.args[1], relax.Tuple) or len(call.args[1].fields) != 2:
            return call
        data, bound = call.args[1].fields
        value = self.lookup_binding(bound) if isinstance(bound, relax.Var) else bound
        if not isinstance(value, tvm.ir.Constant) or len(value.value.shape) != 0:
            return call
        callee = self.mod[call.args[0]]
        for te_op, relax_op in self.OPS:
            if tvm_ffi.structural_equal(callee, _emit_te_func(te_op, data.ty, bound.ty)):
                self.rewritten += 1
                return relax_op(data, value)
        return call


def _emit_te_func(te_op, *types) -> tvm.tirx.PrimFunc:
    """The PrimFunc ``BlockBuilder.emit_te(te_op, *args)`` makes for arguments of ``types``."""
    bb = relax.BlockBuilder()
    bb.call_te(te_op, *[relax.Var(f"arg{i}", ty) for i, ty in enumerate(types)])
    return next(func for func in bb.get().functions.values() if isinstance(func, tvm.tirx.PrimFunc))


def _fold_constant_layouts(mod: tvm.IRModule) -> tvm.IRModule:
    folder = _ConstantLayoutFolder(mod)
    return with_functions(mod, {gvar: folder.visit_expr(func) for gvar, func in non_primitive_functions(mod)})


@mutator
class _ConstantLayoutFolder(PyExprMutator):
    """Replaces ``permute_dims(constant)`` and ``reshape(constant, static shape)`` (a conv's bias
    reshaped to ``[1, C, 1, 1]``, which ``ConvertLayout`` could not convert) by their values, and
    the ONNX ``Clip`` bounds' ``where(isnan(c), inf, c)`` of constants."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        args = [self.lookup_binding(a) if isinstance(a, relax.Var) else a for a in call.args]
        if not args or not isinstance(args[0], tvm.ir.Constant):
            return call
        if call.op.same_as(_ISNAN):
            return relax.const(np.isnan(args[0].value.numpy()))
        if call.op.same_as(_WHERE) and all(isinstance(a, tvm.ir.Constant) for a in args):
            condition, yes, no = (a.value.numpy() for a in args)
            return relax.const(np.where(condition, yes, no).astype(str(call.ty.dtype)))
        value = args[0].value.numpy()
        if call.op.same_as(_PERMUTE_DIMS) and call.attrs.axes is not None:
            return relax.const(np.ascontiguousarray(value.transpose([int(axis) for axis in call.attrs.axes])))
        shape = getattr(call.ty, "shape", None)
        if (call.op.same_as(_RESHAPE) and shape is not None
                and all(isinstance(d, tvm.tirx.IntImm) for d in shape)):
            return relax.const(value.reshape([int(d) for d in shape]))
        return call

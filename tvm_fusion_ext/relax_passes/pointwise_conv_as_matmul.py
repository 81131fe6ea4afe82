"""``PointwiseConvAsMatmul``: a 1x1 NCHW convolution as a matmul over the flattened image, where
the register tile of the matmul is predicted cheaper.

An NCHW conv with a 1x1 kernel, stride 1, no padding and one group is, per image, the matmul
``W[F, C] · X[C, H·W]``. As a conv, its register tile (:mod:`tvm_fusion_ext.tir_passes.register_tile`)
vectorises one image row (whole vectors only when the row is a multiple of the lanes: 56 columns
on AVX2, not on AVX-512) or the output channels, and the latter keeps the accumulator transposed
against the NCHW output, so the epilogue writes it back with strided reads. Over the flattened
image the ``H·W`` axis is one contiguous loop (56 x 56 = 196 AVX-512 vectors) along which the input
is read and the output written, and the weight is broadcast. The pass legalizes both forms of each
such conv (as ``LegalizeOps`` will), asks the planner for the cycles per output element of each
one's micro-kernel (:func:`~tvm_fusion_ext.tir_passes.register_tile.micro_kernel_cycles`), and
rewrites the conv as ``reshape -> matmul -> reshape`` where the matmul's are fewer. The reshape
back to ``[N, F, H, W]`` then sinks through the element-wise ops after the matmul (bias, batch
norm, residual add, activation), whose other operands are viewed as ``[.., H·W]`` too, so that
the matmul keeps its epilogue in one kernel (``FuseOps`` fuses no reshape after a matmul). The
reshapes of activations are views (``RewriteDataflowReshape`` lowers them to the VM's zero-copy
reshape); those of constants (the weight, a bias) are folded with NumPy. This is the graph simplification of the
mindspore-jit-graph-kernel-fusion paper (an equal, cheaper graph before fusion), and what ONNX
Runtime's MLAS does with a pointwise conv (a GEMM call).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax, s_tir
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..hardware import HardwareSpec, spec_for_target
from ..ir_utils import non_primitive_functions, with_functions
from ..registration import register_pass
from ..tir_passes.analysis import analyze_blocks
from ..tir_passes.register_tile import micro_kernel_cycles


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.PointwiseConvAsMatmul")
class PointwiseConvAsMatmul:
    """Module pass (module docstring). ``target`` defaults to ``Target.current()``, then
    ``llvm``; ``spec`` to :func:`~tvm_fusion_ext.hardware.spec_for_target` of it. ``rewritten``
    counts the convs rewritten by the last run."""

    def __init__(self, target: tvm.target.Target | None = None, spec: HardwareSpec | None = None):
        self.target = target
        self.spec = spec
        self.rewritten = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        target = self.target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
        spec = self.spec or spec_for_target(target)
        decided: dict[tuple, bool] = {}
        self.rewritten = 0

        def rewrite(call, _matched):
            # The pattern also matches a variable bound to a conv (``gv = lv``): only calls change.
            shapes = pointwise_conv_shapes(call) if isinstance(call, relax.Call) else None
            if shapes is None:
                return call
            if shapes not in decided:
                decided[shapes] = matmul_is_cheaper(*shapes, str(call.ty.dtype), spec)
            if not decided[shapes]:
                return call
            self.rewritten += 1
            return as_matmul(call, shapes)

        pattern = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        mod = with_functions(mod, {gvar: rewrite_call(pattern, rewrite, func)
                                   for gvar, func in non_primitive_functions(mod)})
        if not self.rewritten:
            return mod
        sinker = _SinkImageReshapes(mod)
        return with_functions(mod, {gvar: relax.analysis.remove_all_unused(sinker.visit_expr(func))
                                    for gvar, func in non_primitive_functions(mod)})


def pointwise_conv_shapes(call: relax.Call) -> tuple[int, int, int, int, int] | None:
    """``(N, C, H, W, F)`` of a static float NCHW / OIHW conv2d with a 1x1 kernel, stride 1, no
    padding, no dilation and one group, else ``None``."""
    attrs = call.attrs
    if (attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" or attrs.out_layout != "NCHW"
            or int(attrs.groups) != 1 or any(int(v) != 1 for v in [*attrs.strides, *attrs.dilation])
            or any(int(v) != 0 for v in attrs.padding)):
        return None
    data, weight = (arg.ty for arg in call.args)
    if not all(isinstance(t, relax.TensorType) and t.shape is not None for t in (data, weight, call.ty)):
        return None
    dims = [*data.shape.values, *weight.shape.values]
    if not all(isinstance(d, tvm.tirx.IntImm) for d in dims) or "float" not in str(call.ty.dtype):
        return None
    n, c, h, w, f, _, kh, kw = (int(d) for d in dims)
    return (n, c, h, w, f) if (kh, kw) == (1, 1) else None


def matmul_is_cheaper(n: int, c: int, h: int, w: int, f: int, dtype: str, spec: HardwareSpec) -> bool:
    """Whether the matmul form's micro-kernel takes fewer cycles per output than the conv's (a
    form the planner gives no micro-kernel counts as infinitely slow)."""
    data = relax.Var("x", relax.TensorType((n, c, h, w), dtype))
    weight = relax.Var("w", relax.TensorType((f, c, 1, 1), dtype))
    flat = relax.Var("x", relax.TensorType((n, c, h * w), dtype))
    matrix = relax.Var("w", relax.TensorType((f, c), dtype))
    conv = _contraction_cycles(relax.op.nn.conv2d(data, weight), [data, weight], weight, spec)
    matmul = _contraction_cycles(relax.op.matmul(matrix, flat), [matrix, flat], matrix, spec)
    return matmul < conv


def as_matmul(call: relax.Call, shapes: tuple[int, int, int, int, int]) -> relax.Expr:
    """``reshape(matmul(W[F, C], reshape(x, [N, C, H·W])), [N, F, H, W])`` for the conv ``call``."""
    n, c, h, w, f = shapes
    data, weight = call.args
    product = relax.op.matmul(_reshaped(weight, (f, c)), relax.op.reshape(data, (n, c, h * w)),
                              out_dtype=str(call.ty.dtype))
    return relax.op.reshape(product, (n, f, h, w))


def _contraction_cycles(expr: relax.Expr, params: list, weight: relax.Var, spec: HardwareSpec) -> float:
    """Cycles per output of the micro-kernel of ``expr`` as ``LegalizeOps`` writes it, its
    ``weight`` laid out at compile time as the pipeline's layout-free weights are."""
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(expr))
    legalized = relax.transform.LegalizeOps()(bb.get())
    (func,) = [f for f in legalized.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    contractions = [info for _, info in analyze_blocks(s_tir.Schedule(func), skip_loopless=True) or []
                    if info.is_contraction]
    if len(contractions) != 1:
        return math.inf
    prepacked = [func.params[params.index(weight)]]
    cycles = micro_kernel_cycles(contractions[0], spec, prepacked=prepacked)
    return math.inf if cycles is None else cycles


# Element-wise ops a reshape of the matmul's output sinks through: their output element i reads
# element i of each tensor operand (after broadcasting), whatever the shape.
ELEMENTWISE_OPS = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "nn.relu", "nn.silu",
    "nn.gelu", "nn.gelu_tanh", "sigmoid", "tanh", "exp", "clip"))
_RESHAPE = tvm.ir.Op.get("relax.reshape")
_MATMUL = tvm.ir.Op.get("relax.matmul")


@mutator
class _SinkImageReshapes(PyExprMutator):
    """Moves ``reshape(m, [N, F, H, W])`` of a matmul's ``[N, F, H·W]`` output below the
    element-wise ops that read it: ``op(reshape(m), b)`` becomes ``reshape(op(m, b'), [N, F, H,
    W])`` with ``b'`` a ``[.., H·W]`` (or ``[.., 1]``) view of ``b``. The original variable keeps its
    value (a reshape), so every other reader is unchanged; a reshape nobody reads is dropped."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.flat: dict = {}  # 4-D variable -> its [N, F, H·W] source

    def visit_var_binding_(self, binding):
        value = self.visit_expr(binding.value)
        flat = self._sunk(value)
        if flat is not None:
            source = self.builder_.emit(flat, name_hint=f"{binding.var.name}_flat")
            value = relax.op.reshape(source, binding.var.ty.shape)
            self.flat[binding.var] = source
        elif self._splits_matmul_output(value):
            self.flat[binding.var] = value.args[0]
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))

    def _splits_matmul_output(self, value) -> bool:
        """``value`` is ``reshape(m, [.., H, W])`` of a matmul's ``[.., H·W]`` output."""
        if not (isinstance(value, relax.Call) and value.op.same_as(_RESHAPE)
                and isinstance(value.args[0], relax.Var)):
            return False
        producer = self.lookup_binding(value.args[0])
        return (isinstance(producer, relax.Call) and producer.op.same_as(_MATMUL)
                and _flattened_shape(value.ty) == _static_shape(value.args[0].ty))

    def _sunk(self, value):
        """``op`` applied to ``[.., H·W]`` operands when ``value`` is an element-wise call reading
        a flattened variable and every other tensor operand has a ``[.., H·W]`` view, else ``None``."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                and value.op.name in ELEMENTWISE_OPS and any(a in self.flat for a in value.args)):
            return None
        image = _static_shape(value.ty)
        if image is None or len(image) != 4:
            return None
        args = []
        for arg in value.args:
            if arg in self.flat:
                args.append(self.flat[arg])
            elif not isinstance(arg.ty, relax.TensorType):
                args.append(arg)  # clip's bounds
            else:
                shape = _static_shape(arg.ty)
                view = _flat_view_shape(shape, image) if shape is not None else None
                if view is None:
                    return None
                args.append(_reshaped(arg, view) if view != shape else arg)
        return relax.Call(value.op, args, value.attrs)


def _static_shape(ty) -> tuple[int, ...] | None:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    dims = ty.shape.values
    return tuple(int(d) for d in dims) if all(isinstance(d, tvm.tirx.IntImm) for d in dims) else None


def _flattened_shape(ty) -> tuple[int, ...] | None:
    """``[.., H·W]`` of a static ``[.., H, W]`` tensor type."""
    shape = _static_shape(ty)
    return None if shape is None or len(shape) < 2 else (*shape[:-2], shape[-2] * shape[-1])


def _flat_view_shape(shape: tuple[int, ...], image: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape an operand of ``shape`` broadcast against the 4-D ``image`` takes against its
    flattened ``[N, F, H·W]``: ``[.., H·W]`` for a full image, ``[.., 1]`` for one value per
    channel, unchanged for a scalar; ``None`` for any other broadcast (a row or a column)."""
    if len(shape) == 0:
        return shape
    if len(shape) != 4:
        return None
    if shape[-2:] == image[-2:]:
        return (*shape[:2], image[-2] * image[-1])
    if shape[-2:] == (1, 1):
        return (*shape[:2], 1)
    return None


def _reshaped(expr: relax.Expr, shape: tuple[int, ...]) -> relax.Expr:
    """``reshape(expr, shape)``, folded with NumPy for a constant."""
    if isinstance(expr, tvm.ir.Constant):
        return relax.const(expr.value.numpy().reshape(shape))
    return relax.op.reshape(expr, shape)

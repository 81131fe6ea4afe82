"""``Simplify``: MindSpore's graph simplification on high-level Relax, iterated to a fixed point.

mindspore-jit-graph-kernel-fusion ("graph simplification" before kernel fusion): algebraic rules
remove operators that compute nothing, private functions are inlined so the rules see across them,
common subexpressions are merged and dead code is dropped, and the loop repeats until the module
stops changing. "No-task" operators (reshape, expand_dims, squeeze, flatten only re-index memory)
are canonicalised to ``R.reshape``; TVM's ``RewriteDataflowReshape`` (in the lowering passes) then
turns every reshape-pattern kernel into a view, so they launch nothing.

Rules (each bumps a named counter in :attr:`Simplify.counters`):

===================  ======================================================================================
``add_zero``         ``x + 0``, ``0 + x``, ``x - 0`` -> ``x`` (``0``: a constant or ``R.zeros``)
``mul_one``          ``x * 1``, ``1 * x``, ``x / 1`` -> ``x``
``mul_zero``         ``x * 0``, ``0 * x`` -> ``zeros``
``sub_self``         ``x - x`` -> ``zeros``
``neg_neg``          ``-(-x)`` -> ``x``
``transpose``        ``permute_dims(permute_dims(x, p), q)`` -> one permute, or ``x`` if identity
``reshape``          ``reshape(reshape(x, s), t)`` -> ``reshape(x, t)``; ``reshape(x, shape(x))`` -> ``x``
``cast``             ``astype(x, dtype(x))`` -> ``x``
``concat_slices``    ``concat(x[a0:a1], x[a1:a2], ...)`` covering an axis of ``x`` in order -> ``x``
``concat_branches``  ``concat(x[a0:a1] + c0, x[a1:a2] + c1, ...)`` -> ``x + concat(c0, c1, ...)``
                     (one of ``+ - * /``, slices on the same side: the bias adds after a parallel fusion)
``no_task``          ``expand_dims`` / ``squeeze`` / ``flatten`` -> ``reshape``
===================  ======================================================================================

The constant rules only fire when the result keeps ``x``'s shape and dtype (no broadcasting away).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.graph import shape_without_axis, static_shape
from ..ir_utils import non_primitive_functions
from ..registration import register_pass

MAX_ITERATIONS = 16  # fixed-point bound; real modules settle in 2-3 rounds


def _op(name: str):
    return tvm.ir.Op.get(name)


_ADD, _SUB, _MUL, _DIV = (_op(f"relax.{n}") for n in ("add", "subtract", "multiply", "divide"))
_NEG = _op("relax.negative")
_PERMUTE = _op("relax.permute_dims")
_RESHAPE = _op("relax.reshape")
_ASTYPE = _op("relax.astype")
_CONCAT = _op("relax.concat")
_SLICE = _op("relax.strided_slice")
_ZEROS, _ONES = _op("relax.zeros"), _op("relax.ones")
_NO_TASK = tuple(_op(f"relax.{n}") for n in ("expand_dims", "squeeze", "flatten"))


def _is(call, op) -> bool:
    return isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.same_as(op)


def _constant_value(expr) -> float | None:
    """The single value of a constant tensor whose elements are all equal (``R.zeros`` and
    ``R.ones``, which ``Gradient`` emits, included), else ``None``."""
    if _is(expr, _ZEROS):
        return 0.0
    if _is(expr, _ONES):
        return 1.0
    if not isinstance(expr, tvm.ir.Constant):
        return None
    data = expr.value.numpy()
    if data.size == 0:
        return None
    flat = data.reshape(-1)
    if not np.all(flat == flat[0]):
        return None
    return float(flat[0])


def _same_type(a, b) -> bool:
    ta, tb = a.ty, b.ty
    if not isinstance(ta, relax.TensorType) or not isinstance(tb, relax.TensorType):
        return False
    if ta.shape is None or tb.shape is None or str(ta.dtype) != str(tb.dtype):
        return False
    return tvm_ffi.structural_equal(ta.shape, tb.shape)


@mutator
class _AlgebraicSimplifier(PyExprMutator):
    """One sweep of the rules over a function (bindings are looked through, not inlined)."""

    def __init__(self, mod: tvm.IRModule, counters: Counter):
        super().__init__(mod)
        self.counters = counters

    def _bound(self, expr):
        """The value bound to ``expr`` if it is a var defined in this function, else ``expr``."""
        if isinstance(expr, relax.Var):
            value = self.lookup_binding(expr)
            if value is not None:
                return value
        return expr

    def _hit(self, rule: str, result):
        self.counters[rule] += 1
        return result

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        for rule in (self._arith, self._layout, self._concat_slices):
            result = rule(call)
            if result is not None:
                return result
        return call

    # ---- arithmetic identities ------------------------------------------------------------------
    def _arith(self, call):
        args = list(call.args)
        if _is(call, _NEG):
            inner = self._bound(args[0])
            if _is(inner, _NEG):
                return self._hit("neg_neg", inner.args[0])
            return None
        if not any(call.op.same_as(op) for op in (_ADD, _SUB, _MUL, _DIV)):
            return None
        lhs, rhs = args
        cl, cr = _constant_value(self._bound(lhs)), _constant_value(self._bound(rhs))
        zeros = relax.op.zeros(call.ty.shape, call.ty.dtype) if isinstance(call.ty, relax.TensorType) \
            and call.ty.shape is not None else None
        if call.op.same_as(_ADD):
            if cr == 0.0 and _same_type(lhs, call):
                return self._hit("add_zero", lhs)
            if cl == 0.0 and _same_type(rhs, call):
                return self._hit("add_zero", rhs)
        elif call.op.same_as(_SUB):
            if cr == 0.0 and _same_type(lhs, call):
                return self._hit("add_zero", lhs)
            if lhs.same_as(rhs) and zeros is not None:
                return self._hit("sub_self", zeros)
        elif call.op.same_as(_MUL):
            if cr == 1.0 and _same_type(lhs, call):
                return self._hit("mul_one", lhs)
            if cl == 1.0 and _same_type(rhs, call):
                return self._hit("mul_one", rhs)
            if (cl == 0.0 or cr == 0.0) and zeros is not None:
                return self._hit("mul_zero", zeros)
        elif call.op.same_as(_DIV) and cr == 1.0 and _same_type(lhs, call):
            return self._hit("mul_one", lhs)
        return None

    # ---- layout: transposes, reshapes, casts, no-task ops -------------------------------------
    def _layout(self, call):
        x = call.args[0]
        if _is(call, _PERMUTE):
            ndim = call.ty.ndim
            outer = _axes(call, ndim)
            inner_call = self._bound(x)
            if _is(inner_call, _PERMUTE):
                inner = _axes(inner_call, ndim)
                composed = [inner[a] for a in outer]
                source = inner_call.args[0]
                if composed == list(range(ndim)):
                    return self._hit("transpose", source)
                return self._hit("transpose", relax.op.permute_dims(source, composed))
            if outer == list(range(ndim)):
                return self._hit("transpose", x)
            return None
        if _is(call, _RESHAPE):
            inner_call = self._bound(x)
            if _is(inner_call, _RESHAPE):
                source = inner_call.args[0]
                if _same_type(source, call):
                    return self._hit("reshape", source)
                return self._hit("reshape", relax.op.reshape(source, call.args[1]))
            if _same_type(x, call):
                return self._hit("reshape", x)
            return None
        if _is(call, _ASTYPE):
            if _same_type(x, call):
                return self._hit("cast", x)
            return None
        if any(call.op.same_as(op) for op in _NO_TASK):
            shape = call.ty.shape if isinstance(call.ty, relax.TensorType) else None
            if shape is not None:
                return self._hit("no_task", relax.op.reshape(x, shape))
        return None

    # ---- concat of the slices of one tensor (what parallel fusion leaves behind) -------------
    def _concat_slices(self, call):
        if not _is(call, _CONCAT):
            return None
        fields = call.args[0]
        if not isinstance(fields, relax.Tuple) or not fields.fields:
            return None
        axis = int(call.attrs.axis)
        source = self._tiled_source([self._bound(f) for f in fields.fields], axis)
        if source is not None and _same_type(source, call):
            return self._hit("concat_slices", source)
        return self._concat_branches(call, fields.fields, axis)

    def _concat_branches(self, call, fields, axis: int):
        """``concat(op(x[a0:a1], c0), op(x[a1:a2], c1), ...)`` -> ``op(x, concat(c0, c1, ...))``:
        one element-wise op per slice of a tiled tensor (the bias adds after a parallel fusion)."""
        branches = [self._bound(f) for f in fields]
        first = branches[0]
        if not any(_is(first, op) for op in (_ADD, _SUB, _MUL, _DIV)):
            return None
        for side in (0, 1):  # which operand is the slice
            pieces, others = [], []
            for field, branch in zip(fields, branches):
                if not _is(branch, first.op):
                    return None
                piece, other = branch.args[side], branch.args[1 - side]
                other_shape, field_shape = static_shape(other.ty), static_shape(field.ty)
                if other_shape is None or field_shape is None or len(other_shape) != len(field_shape) \
                        or other_shape[axis] != field_shape[axis] or not _same_type(piece, field):
                    break
                pieces.append(self._bound(piece))
                others.append(other)
            else:
                source = self._tiled_source(pieces, axis)
                if source is None or not _same_type(source, call):
                    continue
                if len({shape_without_axis(static_shape(o.ty), axis) for o in others}) != 1:
                    continue
                merged = self.builder_.emit(relax.op.concat(others, axis=axis))
                args = (source, merged) if side == 0 else (merged, source)
                return self._hit("concat_branches", relax.Call(first.op, args, first.attrs))
        return None

    @staticmethod
    def _tiled_source(pieces, axis: int):
        """The tensor ``pieces`` (bound values) slice, in order and without gaps, along ``axis``."""
        source, expected_begin = None, 0
        for piece in pieces:
            if not _is(piece, _SLICE) or len(piece.args) > 4:
                return None  # strided (step) slices never tile an axis
            axes = _ints(piece.args[1])
            src = piece.args[0]
            src_shape = static_shape(src.ty)
            if src_shape is None or len(axes) != 1 or axes[0] % len(src_shape) != axis % len(src_shape):
                return None
            if source is None:
                source = src
            elif not source.same_as(src):
                return None
            begin, end = _ints(piece.args[2])[0], _ints(piece.args[3])[0]
            if begin != expected_begin:
                return None
            expected_begin = min(end, src_shape[axes[0]])
        if source is None or expected_begin != static_shape(source.ty)[axis]:
            return None
        return source


def _ints(expr) -> list[int]:
    """Integers of a Relax tuple of ``IntImm`` / ``PrimValue`` or of a ``ShapeExpr``."""
    items = expr.values if isinstance(expr, relax.ShapeExpr) else expr.fields
    return [int(getattr(item, "value", item)) for item in items]


def _axes(call, ndim: int) -> list[int]:
    axes = call.attrs.axes
    if axes is None:
        return list(range(ndim))[::-1]
    return [int(a) % ndim for a in axes]


@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.AlgebraicSimplify")
class AlgebraicSimplify:
    """One sweep of the algebraic rules over every non-primitive Relax function."""

    def __init__(self, counters: Counter | None = None):
        self.counters = counters if counters is not None else Counter()

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gvar, func in non_primitive_functions(mod):
            rewriter = _AlgebraicSimplifier(mod, self.counters)
            new_func = rewriter.visit_expr(func)
            rewriter.builder_.update_func(gvar, new_func)
            mod = rewriter.builder_.get()
        return mod


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.Simplify")
class Simplify:
    """MindSpore graph simplification to a fixed point (see the module docstring).

    One round is ``InlinePrivateFunctions``, the algebraic rules, ``CanonicalizeBindings``,
    ``EliminateCommonSubexpr`` and ``DeadCodeElimination``; rounds repeat until the module is
    structurally unchanged (at most :data:`MAX_ITERATIONS`). ``self.counters`` counts rule hits and
    ``self.rounds`` the rounds run.
    """

    def __init__(self):
        self.counters: Counter = Counter()
        self.rounds = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        one_round = tvm.transform.Sequential([
            relax.transform.InlinePrivateFunctions(),
            AlgebraicSimplify(self.counters),
            relax.transform.CanonicalizeBindings(),
            relax.transform.EliminateCommonSubexpr(),
            relax.transform.DeadCodeElimination(),
        ])
        for _ in range(MAX_ITERATIONS):
            self.rounds += 1
            new = one_round(mod)
            if tvm_ffi.structural_equal(new, mod):
                return new
            mod = new
        return mod

"""``ParallelFusion``: NeoFlow's parallel fusion (neoflow-training-compilation section 4.3).

Operators with no data dependency between them that share one input tensor are merged into one
operator along a *fusible dimension*: the other operands are concatenated, one operator runs, and
each original result is a slice of the fused result. TVM's ``CombineParallelMatmul`` does this for
matmuls sharing the left operand only; this pass handles ``R.matmul`` with either operand shared and
``R.nn.conv2d`` sharing its data input, so NeoFlow's capsule convolution (8 conv2d on one input,
section 7.4) becomes one conv2d.

Split as in Inductor's horizontal fusion: :func:`match` gives a binding's fusion key (bindings with
equal keys are candidates for one group) and :func:`fuse` emits the merged operator. The fusible
dimension follows the paper: an output dimension is fusible for a pair when the two outputs agree on
every other dimension; we consider only output dimensions indexed by the non-shared operand alone
(the others would need the shared tensor itself concatenated), and take the first one.

Runs on high-level Relax (before ``LegalizeOps``), inside dataflow blocks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.graph import shape_without_axis, static_shape, used_vars
from ..ir_utils import non_primitive_functions
from ..registration import register_pass

# Search limits, in one place (Inductor style).
MIN_GROUP = 2  # fewer members is not a parallel fusion
MAX_GROUP = 64  # the most operators merged into one

_MATMUL = tvm.ir.Op.get("relax.matmul")
_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


@dataclass(frozen=True)
class _Match:
    """How one binding can join a parallel group.

    ``key`` is equal for bindings that can be merged; ``other`` is the operand to concatenate along
    ``concat_axis``; ``out_axis`` is the output's fusible dimension, ``extent`` the binding's size
    along it.
    """

    key: tuple
    shared: relax.Expr
    other: relax.Expr
    concat_axis: int
    out_axis: int
    extent: int


def match(binding) -> list[_Match]:
    """The ways ``binding`` can be fused in parallel (one per operand it may share), else ``[]``.

    * ``matmul(s, W)`` with 2-D ``W``: shared ``s``; concatenate ``W`` along its columns (axis 1),
      fusible output dimension is the last one.
    * ``matmul(X, s)`` with 2-D ``X``: shared ``s``; concatenate ``X`` along its rows (axis 0),
      fusible output dimension is the row dimension (-2).
    * ``conv2d(s, W)`` in NCHW/OIHW with ``groups == 1``: shared ``s``; concatenate ``W`` along the
      output channels (axis 0); fusible output dimension is the channel dimension (1).
    """
    value = binding.value
    if not isinstance(binding, relax.VarBinding) or not isinstance(value, relax.Call):
        return []
    out_shape = static_shape(binding.var.ty)
    if out_shape is None:
        return []
    dtype = str(binding.var.ty.dtype)
    if value.op.same_as(_MATMUL):
        a, b = value.args
        a_shape, b_shape = static_shape(a.ty), static_shape(b.ty)
        if a_shape is None or b_shape is None:
            return []
        out_dtype = str(value.attrs.out_dtype)
        found = []
        if len(b_shape) == 2:  # shared left operand: fusible dim = output columns
            key = ("matmul_lhs", a, shape_without_axis(out_shape, -1), shape_without_axis(b_shape, 1), dtype, out_dtype)
            found.append(_Match(key, a, b, 1, len(out_shape) - 1, out_shape[-1]))
        if len(a_shape) == 2 and len(out_shape) == 2:  # shared right operand: fusible dim = rows
            key = ("matmul_rhs", b, shape_without_axis(out_shape, 0), shape_without_axis(a_shape, 0), dtype, out_dtype)
            found.append(_Match(key, b, a, 0, 0, out_shape[0]))
        return found
    if value.op.same_as(_CONV2D):
        x, w = value.args
        attrs = value.attrs
        w_shape = static_shape(w.ty)
        if (w_shape is None or int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW"
                or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW"):
            return []
        conv_attrs = (tuple(int(s) for s in attrs.strides), tuple(int(p) for p in attrs.padding),
                      tuple(int(d) for d in attrs.dilation), str(attrs.out_dtype))
        key = ("conv2d", x, shape_without_axis(out_shape, 1), shape_without_axis(w_shape, 0), dtype, conv_attrs)
        return [_Match(key, x, w, 0, 1, out_shape[1])]
    return []


def fuse(builder: relax.BlockBuilder, call: relax.Call, group: list[_Match]) -> relax.Var:
    """Emit the merged operator of ``group`` (members' ``call`` template) and return its result."""
    first = group[0]
    others = [m.other for m in group]
    concat = builder.emit(relax.op.concat(others, axis=first.concat_axis))
    if call.op.same_as(_MATMUL):
        args = (first.shared, concat) if first.key[0] == "matmul_lhs" else (concat, first.shared)
        return builder.emit(relax.op.matmul(*args, out_dtype=call.attrs.out_dtype))
    attrs = call.attrs
    return builder.emit(relax.op.nn.conv2d(
        first.shared, concat, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation,
        groups=attrs.groups, data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
        out_layout=attrs.out_layout, out_dtype=attrs.out_dtype))


def _groups(bindings: list, ancestors: list[set[int]]) -> list[list[tuple[int, _Match]]]:
    """Groups of independent bindings with one key, members in binding order (section 4.3 search:
    for each operator, the operators sharing an input with no data dependency on it)."""
    by_key: dict = {}
    for i, binding in enumerate(bindings):
        for m in match(binding):
            by_key.setdefault(_hashable(m.key), []).append((i, m))
    taken: set[int] = set()
    groups = []
    for candidates in by_key.values():
        group: list[tuple[int, _Match]] = []
        for i, m in candidates:
            if i in taken or len(group) >= MAX_GROUP:
                continue
            if any(j in ancestors[i] or i in ancestors[j] for j, _ in group):
                continue  # a data dependency: not parallel
            group.append((i, m))
        if len(group) >= MIN_GROUP:
            taken.update(i for i, _ in group)
            groups.append(group)
    return groups


def _hashable(key: tuple) -> tuple:
    """Relax expressions hash by identity, which is what "the same input tensor" means here."""
    return tuple(k if isinstance(k, (str, int, tuple)) else ("expr", k) for k in key)


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.fused_groups = 0
        self.fused_ops = 0

    def visit_dataflow_block_(self, block):
        bindings = list(block.bindings)
        position = {b.var: i for i, b in enumerate(bindings)}
        inputs = [[position[v] for v in used_vars(b.value) if v in position] for b in bindings]
        ancestors: list[set[int]] = []
        for i in range(len(bindings)):
            acc = set()
            for p in inputs[i]:
                acc.add(p)
                acc |= ancestors[p]
            ancestors.append(acc)
        groups = _groups(bindings, ancestors)
        if not groups:
            return super().visit_dataflow_block_(block)
        self.fused_groups += len(groups)
        self.fused_ops += sum(len(g) for g in groups)

        # Units: a group merged into one node, every other binding on its own; emit in a
        # topological order of the merged graph, preferring the original positions.
        unit_of = list(range(len(bindings)))
        members: dict[int, list[int]] = {i: [i] for i in range(len(bindings))}
        for group in groups:
            head = group[0][0]
            for i, _ in group[1:]:
                unit_of[i] = head
                members.pop(i)
            members[head] = [i for i, _ in group]
        group_of_head = {g[0][0]: g for g in groups}
        deps = {u: {unit_of[p] for i in ms for p in inputs[i]} - {u} for u, ms in members.items()}
        users: dict[int, set[int]] = {u: set() for u in members}
        for u, ds in deps.items():
            for d in ds:
                users[d].add(u)
        pending = {u: len(ds) for u, ds in deps.items()}
        ready = [u for u, n in pending.items() if n == 0]
        heapq.heapify(ready)

        self.builder_._begin_dataflow_block()
        while ready:
            u = heapq.heappop(ready)
            if u in group_of_head:
                self._emit_group(bindings, group_of_head[u])
            else:
                self.visit_binding(bindings[u])
            for v in users[u]:
                pending[v] -= 1
                if pending[v] == 0:
                    heapq.heappush(ready, v)
        return self.builder_._end_block()

    def _emit_group(self, bindings, group) -> None:
        remapped = [_Match(m.key, self.visit_expr(m.shared), self.visit_expr(m.other), m.concat_axis,
                           m.out_axis, m.extent) for _, m in group]
        fused = fuse(self.builder_, bindings[group[0][0]].value, remapped)
        begin = 0
        for (i, _), m in zip(group, remapped):
            var = bindings[i].var
            piece = relax.op.strided_slice(fused, axes=[m.out_axis], begin=[begin], end=[begin + m.extent])
            begin += m.extent
            emit = self.builder_.emit if isinstance(var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(var, emit(piece, name_hint=var.name))


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.ParallelFusion")
class ParallelFusion:
    """Merge independent matmul / conv2d bindings sharing an input (NeoFlow section 4.3).

    After the pass, ``self.fused_groups`` and ``self.fused_ops`` count the merged operators
    (observability, as Inductor's counters).
    """

    def __init__(self):
        self.fused_groups = 0
        self.fused_ops = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gvar, func in non_primitive_functions(mod):
            rewriter = _Rewriter(mod)
            new_func = rewriter.visit_expr(func)
            if not rewriter.fused_groups:
                continue
            self.fused_groups += rewriter.fused_groups
            self.fused_ops += rewriter.fused_ops
            rewriter.builder_.update_func(gvar, new_func)
            mod = rewriter.builder_.get()
        return mod

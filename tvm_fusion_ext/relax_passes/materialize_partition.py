"""The one pass that turns any partition of a dataflow block into grouped primitive functions.

Every partitioner of the package (dominator, APOLLO, GraphTurbo, NeoFlow) produces a partition of
each dataflow block's bindings (:mod:`tvm_fusion_ext.analysis.graph` node ids); this pass rewrites the
function so that each group of two or more bindings becomes a private ``{"Primitive": True}`` Relax
function called from the caller, which ``FuseTIR`` then turns into one PrimFunc.

The rewrite follows TVM's ``OperatorFusor`` / ``FunctionCreator`` (src/relax/transform/fuse_ops.cc)
rule for rule, so that fed with FuseOps' own grouping it produces FuseOps' module exactly: group
names (``fused_`` + callee names), parameter order (first use), lifted constants (``param_<n>``),
inlined prim values and shapes, partially used tuple parameters split per item, a trailing
``tir_vars`` shape parameter for free symbolic variables, multi-output groups returning a tuple, and
the emission order of the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.graph import DataflowGraph, NodeKind, build_graphs
from ..ir_utils import PRIMITIVE_ATTR, is_external, non_primitive_functions
from ..registration import register_pass

Partitioner = Callable[[DataflowGraph], Iterable[Sequence[int]]]

_LOG = logging.getLogger(__name__)

_CALL_TIR_OPS = (tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.call_tir_inplace"))


@tvm_ffi.register_error("tvm_fusion_ext.PartitionError")
class PartitionError(ValueError):
    """A partition that cannot be materialised (overlapping groups, cycles, unfusible bindings).

    Registered with the FFI so it keeps its type when raised inside a pass.
    """


def validate_partition(graph: DataflowGraph, groups: Iterable[Sequence[int]]) -> list[list[int]]:
    """Check a partition of ``graph`` and return its multi-binding groups, members sorted.

    Refused with :class:`PartitionError`: a binding named twice, an unknown id, a binding that can't
    live inside a primitive function (``call_dps_packed``, ``match_cast``, high-level ops), and a
    group whose fusion would create a cycle between kernels.
    """
    seen: dict[int, int] = {}
    result = []
    for gi, group in enumerate(groups):
        members = sorted(group)
        for m in members:
            if not 0 <= m < len(graph):
                raise PartitionError(f"group {gi} names binding {m}, which is not in the block")
            if m in seen:
                raise PartitionError(
                    f"binding {graph.nodes[m].name!r} is named twice (groups {seen[m]} and {gi})")
            seen[m] = gi
        if len(members) < 2:
            continue
        for m in members:
            if not graph.nodes[m].fusible:
                raise PartitionError(f"binding {graph.nodes[m].name!r} ({graph.nodes[m].kind.value}) "
                                     "cannot be part of a fused function")
        if not graph.group_is_convex(members):
            names = [graph.nodes[m].name for m in members]
            raise PartitionError(f"group {names} would create a cycle: a path leaves it and comes back")
        result.append(members)
    if not graph.groups_are_acyclic(result):
        raise PartitionError("the partition's groups depend on each other in a cycle")
    return result


def normalize_tuple_plumbing(graph: DataflowGraph, groups: list[list[int]]) -> list[list[int]]:
    """Adjust a valid partition so that no group returns a nested tuple or one of its own
    parameters, which ``FuseTIR`` cannot lower:

    * a group with several outputs, one of them tuple-valued (a multi-output kernel, a ``Tuple``),
      brings the tuple-get-items of that tuple into the group (from other groups too), so it
      returns the items; if a whole tuple is still among several outputs (used directly, or a
      block output), the group is dropped. A tuple as the only output is fine (``FuseOps`` makes
      such groups: the kernel then has several outputs);
    * a tuple-get-item of a tuple made outside its group whose item is also needed outside leaves
      the group: inside, the item is a parameter (``FunctionCreator`` splits partially used tuple
      parameters per item), so the group would return its own parameter ("There must be an
      in-place index specified for each output").

    Convexity is kept: an item's only input is its tuple, so moving an item next to its tuple, or
    out of a group that does not hold its tuple, opens no path out of a group and back. Groups
    left with fewer than two bindings are dropped."""
    owner = {m: gi for gi, g in enumerate(groups) for m in g}
    members = [set(g) for g in groups]
    nested = set()
    for gi, group in enumerate(members):
        if not _returns_nested_tuple(graph, group):
            continue
        for m in [m for m in sorted(group) if _tuple_valued(graph, m)]:
            for c in graph.nodes[m].outputs:
                if c not in group and graph.nodes[c].kind is NodeKind.TUPLE_GET_ITEM:
                    if c in owner:
                        members[owner[c]].discard(c)
                    group.add(c)
                    owner[c] = gi
        if _returns_nested_tuple(graph, group):
            nested.add(gi)
    result = []
    for gi, group in enumerate(members):
        kept = [m for m in sorted(group) if not _exported_item(graph.nodes[m], group)]
        if gi not in nested and len(kept) >= 2:
            result.append(kept)
    return result


def _returns_nested_tuple(graph: DataflowGraph, group: set[int]) -> bool:
    outputs = [m for m in group if _needed_outside(graph.nodes[m], group)]
    return len(outputs) > 1 and any(_tuple_valued(graph, m) for m in outputs)


def _tuple_valued(graph: DataflowGraph, index: int) -> bool:
    return isinstance(graph.bindings[index].var.ty, relax.TupleType)


def _needed_outside(node, inside: set[int]) -> bool:
    return node.is_block_output or any(c not in inside for c in node.outputs)


def _exported_item(node, inside: set[int]) -> bool:
    return (node.kind is NodeKind.TUPLE_GET_ITEM and not any(p in inside for p in node.inputs)
            and _needed_outside(node, inside))


@dataclass
class _GroupFunction:
    """Port of TVM's ``FunctionCreator``: the parameters, outputs and body of one group."""

    bindings: list = field(default_factory=list)
    params: list = field(default_factory=list)
    arguments: list = field(default_factory=list)
    name: str = "fused"
    outputs: list = field(default_factory=list)
    defined: set = field(default_factory=set)
    inlined: dict = field(default_factory=dict)
    n_lifted_constants: int = 0
    tuple_param_index: dict = field(default_factory=dict)
    partially_used_tuples: dict = field(default_factory=dict)
    function: relax.Function | None = None

    def append_binding(self, binding, outer_bindings) -> None:
        value = binding.value
        if isinstance(value, relax.Call) and any(value.op.same_as(op) for op in _CALL_TIR_OPS):
            self.name += "_" + value.args[0].name_hint
            for arg in value.args[1].fields:
                self._update_param(arg, outer_bindings)
        elif isinstance(value, relax.Call):
            if isinstance(value.op, tvm.ir.Op):
                self.name += "_" + value.op.name
            elif isinstance(value.op, tvm.ir.GlobalVar):
                callee = value.op.name_hint
                self.name += "_" + (callee.removeprefix("fused_"))
            for arg in value.args:
                for item in (arg.fields if isinstance(arg, relax.Tuple) else [arg]):
                    self._update_param(item, outer_bindings)
                if isinstance(arg.ty, relax.TupleType):
                    self.partially_used_tuples.pop(arg, None)
        elif isinstance(value, relax.TupleGetItem):
            self._update_param(value.tuple_value, outer_bindings)
            if value.tuple_value in self.partially_used_tuples:
                self.partially_used_tuples[value.tuple_value].append(value.index)
        elif isinstance(value, relax.Tuple):
            for item in value.fields:
                self._update_param(item, outer_bindings)
        self.defined.add(binding.var)
        if not isinstance(binding.var, relax.DataflowVar):
            self.append_output(binding.var)
        self.bindings.append(binding)

    def append_output(self, var) -> None:
        if not any(v.same_as(var) for v in self.outputs):
            self.outputs.append(var)

    def _update_param(self, expr, outer_bindings) -> None:
        """``CheckDefAndUpdateParam``: make ``expr`` a parameter unless defined here or inlinable."""
        if any(a.same_as(expr) for a in self.arguments):
            return
        is_var = isinstance(expr, relax.Var)
        if is_var and expr not in self.defined:
            bound, visited = expr, set()
            while isinstance(bound, relax.Var) and bound not in visited and bound in outer_bindings:
                visited.add(bound)
                bound = outer_bindings[bound]
            if not bound.same_as(expr) and _is_inlinable_constant(bound):
                self.inlined[expr] = bound
                return
        if not is_var or expr not in self.defined:
            name = expr.name if is_var else f"param_{self.n_lifted_constants}"
            if not is_var:
                self.n_lifted_constants += 1
            if not _is_inlinable_constant(expr):
                self.arguments.append(expr)
                self.params.append(relax.Var(name, expr.ty))
            if isinstance(expr.ty, relax.TupleType):
                self.partially_used_tuples[expr] = []
                self.tuple_param_index[expr] = len(self.arguments) - 1

    def create(self, builder: relax.BlockBuilder) -> None:
        """``FunctionCreator::CreateFunction``: build the private primitive function."""
        item_remap = self._split_partially_used_tuples()
        substitute = _Substitute(self)
        outputs = [None] * len(self.outputs)
        builder._begin_dataflow_block()
        for binding in self.bindings:
            value = binding.value
            out_idx = self._output_index(binding.var)
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in item_remap:
                param = item_remap[value.tuple_value][value.index]
                substitute.var_map[binding.var] = param
                if out_idx is not None:
                    outputs[out_idx] = param
                continue
            new_value = substitute.visit_expr(value)
            if out_idx is not None:
                new_var = builder.emit_output(new_value)
                outputs[out_idx] = new_var
            else:
                new_var = builder.emit(new_value, name_hint=binding.var.name)
            substitute.var_map[binding.var] = new_var
        block = builder._end_block()
        if not outputs:
            # A group nothing uses: FuseOps drops its bindings (and warns) instead of creating a
            # function.
            _LOG.warning("There are dead codes in the current IRModule, please run the "
                         "DeadCodeElimination Pass before FuseOps")
            self.function = None
            return
        body = outputs[0] if len(outputs) == 1 else relax.Tuple(outputs)
        body = builder.normalize(relax.SeqExpr([block], builder.normalize(body)))
        attrs = {PRIMITIVE_ATTR: True}
        function = relax.Function(self.params, body, None, True, tvm.ir.make_node("ir.DictAttrs", **attrs))
        free = relax.analysis.free_symbolic_vars(function)
        if free:
            self.params.append(relax.Var("tir_vars", relax.ShapeType(list(free))))
            self.arguments.append(relax.ShapeExpr(list(free)))
            function = relax.Function(self.params, body, None, True,
                                      tvm.ir.make_node("ir.DictAttrs", **attrs))
        self.function = relax.utils.copy_with_new_vars(function)

    def _split_partially_used_tuples(self) -> dict:
        remap = {}
        for tuple_arg, indices in self.partially_used_tuples.items():
            pos = self.tuple_param_index[tuple_arg]
            param = self.params[pos]
            item_args, item_params = [], []
            for idx in indices:
                item_param = relax.Var(f"{param.name}_{idx}", tuple_arg.ty.fields[idx])
                item_args.append(relax.TupleGetItem(tuple_arg, idx))
                item_params.append(item_param)
                remap.setdefault(tuple_arg, {})[idx] = item_param
            self.arguments[pos:pos + 1] = item_args
            self.params[pos:pos + 1] = item_params
        return remap

    def _output_index(self, var):
        for i, out in enumerate(self.outputs):
            if out.same_as(var):
                return i
        return None


def _is_inlinable_constant(expr) -> bool:
    """``IsInlinableConstants``: prim values and shapes without free symbolic variables."""
    if isinstance(expr, relax.Tuple):
        return all(_is_inlinable_constant(f) for f in expr.fields)
    if isinstance(expr, (relax.Var, relax.Call)):
        return False
    if isinstance(expr, relax.ShapeExpr):
        return all(not tvm.tirx.analysis.undefined_vars(v) for v in expr.values)
    if isinstance(getattr(expr, "ty", None), tvm.ir.PrimType):  # a prim value
        return not tvm.tirx.analysis.undefined_vars(expr)
    return False


@mutator
class _Substitute(PyExprMutator):
    """Rewrites a group member's value: arguments become parameters, inlined vars their values."""

    def __init__(self, group: _GroupFunction):
        super().__init__()
        self.group = group
        self.var_map: dict = {}

    def _lookup(self, expr, default):
        for arg, param in zip(self.group.arguments, self.group.params):
            if arg.same_as(expr):
                return param
        if isinstance(expr, relax.Var):
            if expr in self.group.inlined:
                return self.group.inlined[expr]
            return self.var_map.get(expr, default)
        return default

    def visit_var_(self, var):
        return self._lookup(var, var)

    def visit_dataflow_var_(self, var):
        return self._lookup(var, var)

    def visit_generic_const_(self, const):
        return self._lookup(const, const)

    def visit_shape_expr_(self, shape):
        return self._lookup(shape, shape)


@mutator
class _GroupRewriter(PyExprMutator):
    """Port of TVM's ``OperatorFusor``: replaces each group by a call of its primitive function."""

    def __init__(self, mod: tvm.IRModule, func_name: str, partitioner: Partitioner):
        super().__init__(mod)
        self.mod = mod
        self.func_name = func_name
        self.partitioner = partitioner
        self.outer_bindings: dict = {}
        self.graphs: list[DataflowGraph] = []
        self.group_counts: list[int] = []

    def rewrite(self, func: relax.Function) -> relax.Function:
        self.outer_bindings = dict(relax.analysis.get_var2val(func))
        self.graphs = build_graphs(self.mod, self.func_name)
        return self.visit_expr(func)

    def visit_dataflow_block_(self, block):
        graph = next((g for g in self.graphs
                      if g.bindings and g.bindings[0].same_as(block.bindings[0])), None)
        groups = validate_partition(graph, self.partitioner(graph)) if graph is not None else []
        groups = normalize_tuple_plumbing(graph, groups) if groups else groups
        self.group_counts.append(len(groups))
        if not groups:
            return super().visit_dataflow_block_(block)
        return self._rewrite_block(graph, groups)

    def _rewrite_block(self, graph: DataflowGraph, groups: list[list[int]]):
        bindings = graph.bindings
        group_of = [None] * len(bindings)
        for gi, members in enumerate(groups):
            for m in members:
                group_of[m] = gi
        functions = [_GroupFunction() for _ in groups]
        for i, binding in enumerate(bindings):  # CollectFuncBindings
            if group_of[i] is not None:
                functions[group_of[i]].append_binding(binding, self.outer_bindings)
        deps = self._collect_boundary(graph, group_of, functions)
        for function in functions:
            function.create(self.builder_)

        self.builder_._begin_dataflow_block()
        pending: dict[int, list] = {}
        for i in self._topo_sort_by_group(graph, group_of, deps):
            binding, gi = bindings[i], group_of[i]
            if gi is None:
                self.visit_binding(binding)
                continue
            function = functions[gi]
            if function.function is None:  # a dead group: its bindings go away
                continue
            outputs = function.outputs
            if len(outputs) > 1 and any(o.same_as(binding.var) for o in outputs):
                pending.setdefault(gi, []).append(binding.var)
            if not function.bindings[-1].same_as(binding):
                continue
            gvar = self.builder_.add_func(function.function, function.name)
            call = relax.Call(gvar, [self.visit_expr(a) for a in function.arguments])
            if len(outputs) == 1 and not isinstance(outputs[0], relax.DataflowVar):
                new_var = self.builder_.emit_output(call)
            else:
                new_var = self.builder_.emit(call)
            if len(outputs) == 1:
                self.set_var_remap(outputs[0], new_var)
                continue
            order = pending.get(gi, []) + [o for o in outputs
                                           if not any(o.same_as(p) for p in pending.get(gi, []))]
            for out in order:
                index = function._output_index(out)
                item = relax.TupleGetItem(new_var, index)
                emit = self.builder_.emit if isinstance(out, relax.DataflowVar) else self.builder_.emit_output
                self.set_var_remap(out, emit(item))
        return self.builder_._end_block()

    @staticmethod
    def _collect_boundary(graph, group_of, functions) -> dict:
        """``CollectFuncBoundary``: group outputs used by other groups, and group dependencies."""
        deps: dict = {}
        position = {b.var: i for i, b in enumerate(graph.bindings)}
        for i, binding in enumerate(graph.bindings):
            current = group_of[i] if group_of[i] is not None else ("node", i)
            for var in _vars_in_use_order(binding.value):
                p = position.get(var)
                if p is None:
                    continue
                producer = group_of[p] if group_of[p] is not None else ("node", p)
                if producer != current:
                    deps.setdefault(current, []).append(producer)
                    if group_of[p] is not None:
                        functions[group_of[p]].append_output(var)
        return deps

    @staticmethod
    def _topo_sort_by_group(graph, group_of, deps) -> list[int]:
        """``TopoSortByGroupDep``: bindings grouped, groups in dependency order, else original."""
        keys = [group_of[i] if group_of[i] is not None else ("node", i) for i in range(len(graph))]
        members: dict = {}
        for i, key in enumerate(keys):
            members.setdefault(key, []).append(i)
        visited, order = set(), []

        def visit(key):
            if key in visited:
                return
            visited.add(key)
            for dep in deps.get(key, []):
                visit(dep)
            order.extend(members[key])

        for key in keys:
            visit(key)
        return order


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.MaterializePartition")
class MaterializePartition:
    """Group the bindings of every dataflow block as a partitioner says (see module docstring).

    ``partitioner(graph) -> groups`` is called once per dataflow block of every Relax function that
    is not itself primitive or offloaded to an external codegen; each group is a sequence of node
    ids of ``graph`` (singletons may be left out). The result is ready for ``FuseTIR``.
    """

    def __init__(self, partitioner: Partitioner):
        self.partitioner = partitioner

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gvar, func in non_primitive_functions(mod):
            if is_external(func):
                continue
            rewriter = _GroupRewriter(mod, gvar.name_hint, self.partitioner)
            new_func = rewriter.rewrite(func)
            if not any(rewriter.group_counts):
                continue
            rewriter.builder_.update_func(gvar, new_func)
            mod = rewriter.builder_.get()
        return mod


def _vars_in_use_order(expr) -> list:
    """Every use of a Var in ``expr``, in ``PostOrderVisit`` order (repeats kept, as FuseOps does)."""
    used = []
    relax.analysis.post_order_visit(expr, lambda e: used.append(e) if isinstance(e, relax.Var) else None)
    return used


def group_by_names(*groups: Sequence[str]) -> Partitioner:
    """A partitioner for hand-chosen groups given by binding names (names unknown in a block are
    ignored, so the same choice can be applied to every block)."""

    def _partition(graph: DataflowGraph):
        names = {n.name: n.index for n in graph.nodes}
        return [[names[n] for n in group if n in names] for group in groups]

    return _partition

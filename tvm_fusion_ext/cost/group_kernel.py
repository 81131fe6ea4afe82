"""The kernel a group of a :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph` becomes, made as
the pipeline makes it (:func:`fused_kernel`), and the module that runs one group alone
(:func:`group_module`, APOLLO's upward feedback): what the profitability check predicts from."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterable

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..analysis.graph import DataflowGraph, NodeKind
from ..ir_utils import PRIMITIVE_ATTR, VarRemapper


def group_module(graph: DataflowGraph, group: Iterable[int]) -> tvm.IRModule:
    """A module whose ``main`` runs exactly the bindings of ``group`` (inputs become parameters),
    with the PrimFuncs they call: what the downstream compiler is asked to compile for one group
    (APOLLO's upward feedback)."""
    return _group_module(graph, group, lift_constants=False)[0]


def _group_module(graph: DataflowGraph, group: Iterable[int], lift_constants: bool):
    """:func:`group_module` and what ``main``'s parameters stand for (variables, and with
    ``lift_constants`` also the tensor constants the bindings' calls read, in order of first use
    with the variables, as ``MaterializePartition`` lifts them out of a grouped function). An item
    of a tuple made outside the group is a parameter itself, as ``FunctionCreator`` splits a
    partially used tuple parameter per item (``FuseTIR`` takes no tuple parameter)."""
    members = sorted(group)
    bindings = [graph.bindings[i] for i in members]
    defined = {b.var for b in bindings}
    outside_items = {b.var for b in bindings
                     if isinstance(b.value, relax.TupleGetItem) and b.value.tuple_value not in defined}
    inputs = []
    for b in bindings:
        value = b.value
        if b.var in outside_items:
            inputs.append(b.var)
            continue
        args = value.args[1].fields if lift_constants and isinstance(value, relax.Call) \
            and len(value.args) > 1 and isinstance(value.args[1], relax.Tuple) else []
        used = [a for a in args if isinstance(a, tvm.ir.Constant) and isinstance(a.ty, relax.TensorType)]
        for v in [*relax.analysis.free_vars(value), *used]:
            if v not in defined and v not in inputs:
                inputs.append(v)
    outputs = [graph.bindings[i].var for i in members
               if graph.nodes[i].is_block_output or not set(graph.nodes[i].outputs) <= set(members)]
    outputs = outputs or [bindings[-1].var]
    params = [relax.Var(v.name if isinstance(v, relax.Var) else f"param_{i}", v.ty)
              for i, v in enumerate(inputs)]
    remap = VarRemapper(dict(zip(inputs, params)))
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for b in bindings:
                if b.var in outside_items:
                    continue
                value = remap.visit_expr(b.value)
                remap.var_map[b.var] = bb.emit(value, name_hint=b.var.name)
            result = remap.var_map[outputs[0]] if len(outputs) == 1 else relax.Tuple(
                [remap.var_map[o] for o in outputs])
            out = bb.emit_output(result)
        bb.emit_func_output(out)
    mini = bb.get()
    for i, b in zip(members, bindings):
        if graph.nodes[i].kind is NodeKind.CALL_TIR:
            mini[b.value.args[0]] = graph.nodes[i].prim_func
    return mini, inputs


def fused_kernel(graph: DataflowGraph, group: Iterable[int], layout_free: bool = True
                 ) -> tirx.PrimFunc | None:
    """The one PrimFunc the pipeline makes of ``group`` (``None`` when ``FuseTIR`` cannot make
    one), as the schedule receives it: the group's bindings as a ``Primitive`` function with its
    constants lifted to parameters (as ``MaterializePartition`` does) and passed by the caller,
    ``FuseTIR`` and ``StmtSimplify`` (the ``fuse_tir`` phase), then
    ``AttachAttrLayoutFreeBuffers`` (the CPU backend's first scheduling pass: constant weights
    are packed once, at compile time, not in the kernel). A single ``call_tir`` keeps its own
    PrimFunc, simplified as the ``fuse_tir`` phase simplifies every kernel (a 1x1 conv's unit
    window iterators become constants, which makes it an einsum the schedule can pad).
    ``layout_free=False`` leaves out ``AttachAttrLayoutFreeBuffers``: the kernel as the DSA
    backend, which packs no weights, receives it."""
    members = sorted(group)
    attach = [relax.transform.AttachAttrLayoutFreeBuffers()] if layout_free else []
    if len(members) == 1 and graph.nodes[members[0]].kind is NodeKind.CALL_TIR:
        mini = tvm.transform.Sequential([s_tir.transform.StmtSimplify(), *attach])(
            group_module(graph, members))
        (kernel,) = [f for _, f in mini.functions_items() if isinstance(f, tirx.PrimFunc)]
        return kernel
    mini, inputs = _group_module(graph, members, lift_constants=True)
    primitive = mini["main"].with_attr(PRIMITIVE_ATTR, True)
    bb = relax.BlockBuilder(tvm.IRModule({gv: f for gv, f in mini.functions_items()
                                          if isinstance(f, tirx.PrimFunc)}))
    gvar = bb.add_func(primitive, "fused")
    params = {v: relax.Var(v.name, v.ty) for v in inputs if isinstance(v, relax.Var)}
    with bb.function("main", list(params.values())):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(gvar, [params.get(v, v) for v in inputs]))
        bb.emit_func_output(out)
    try:
        fused = tvm.transform.Sequential([
            relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
            s_tir.transform.StmtSimplify(), *attach])(bb.get())
    except Exception:  # noqa: BLE001 - a group FuseTIR cannot fuse is no candidate
        return None
    prims = [f for _, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]
    return prims[0] if len(prims) == 1 else None


def group_signature(graph: DataflowGraph, members: list[int], hash_of=tvm_ffi.structural_hash
                    ) -> str | None:
    """A key that two groups share exactly when :func:`fused_kernel` makes the same kernel of
    them: per member in order, its PrimFunc's structural hash (``hash_of``), where each argument
    comes from (a member, the n-th distinct outside value or constant, with its type) and whether
    its result leaves the group. ``None`` for a group with other bindings than ``call_tir`` and
    tuple-get-item. What a member contributes apart from the group is read once per graph."""
    position = {m: i for i, m in enumerate(members)}
    outside: dict = {}
    items = []
    for m in members:
        facts = _member_facts(graph, m, hash_of)
        if facts is None:
            return None
        node = graph.nodes[m]
        leaves = node.is_block_output or any(c not in position for c in node.outputs)
        if node.kind is NodeKind.TUPLE_GET_ITEM:
            producer, index = facts
            items.append(("item", position.get(producer), index, leaves))
            continue
        func_hash, sources, result_type = facts
        args = tuple(("member", position[producer]) if producer in position
                     else ("outside", outside.setdefault(arg, len(outside)), arg_type)
                     for producer, arg, arg_type in sources)
        items.append((func_hash, args, result_type, leaves))
    return "group:" + hashlib.sha256(repr(items).encode()).hexdigest()


# graph -> {node index: what the node contributes to any group's signature}
_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _member_facts(graph: DataflowGraph, m: int, hash_of):
    """``(producer, index)`` of a tuple-get-item; ``(PrimFunc hash, [(producer or None, argument,
    its type)], result type)`` of a ``call_tir``; ``None`` for any other binding."""
    per_node = _FACTS.setdefault(graph, {})
    key = (m, hash_of)
    if key not in per_node:
        node, value = graph.nodes[m], graph.bindings[m].value

        def producer_of(expr):
            return next((p for p in node.inputs if graph.bindings[p].var.same_as(expr)), None)

        if node.kind is NodeKind.TUPLE_GET_ITEM:
            per_node[key] = (producer_of(value.tuple_value), value.index)
        elif node.kind is NodeKind.CALL_TIR:
            per_node[key] = (hash_of(node.prim_func),
                             [(producer_of(arg), arg, str(arg.ty)) for arg in value.args[1].fields],
                             str(value.ty))
        else:
            per_node[key] = None
    return per_node[key]

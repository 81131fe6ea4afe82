"""The per-op facts GraphTurbo's graph scheduler reads (graphturbo-dsa-scheduling.txt section 3).

Algorithms 1-4 need, for each op: its output tensor's shape and bytes (SplitInfo splits the output,
section 3.1), how many primitive ops it stands for (``num_of_op``), its FLOPs and which input axes it
contracts or windows (the recomputation cost model of section 3.1), and axes that cannot be bound to
cores (the "annotated requirements" of section 3.4). :class:`TurboGraph` holds them over a DAG whose
node ids are positions in a topological order; :func:`from_dataflow_graph` reads them off the shared
:class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`, and tests build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm import relax

from ...analysis.graph import DataflowGraph, NodeKind, OpPattern, tensor_bytes
from ...analysis.primitive_types import PrimitiveType, indexed_by_data, is_gather, prim_func_blocks
from .dim_maps import split_maps


@dataclass
class TurboOp:
    """One op. ``contracted`` / ``window`` are axes of its (activation) inputs, in the input's
    numbering, that it reduces over entirely / reads with a halo of ``window[axis]`` extra rows."""

    name: str
    shape: tuple[int, ...]
    out_bytes: int
    inputs: list[int] = field(default_factory=list)
    num_ops: int = 1
    flops: int = 0
    contracted: frozenset[int] = frozenset()
    window: dict[int, int] = field(default_factory=dict)
    unbindable: frozenset[int] = frozenset()
    anchor: bool = False  # has a reduction loop (conv, matmul, reduction): section 4.1's anchor
    contraction: bool = False  # a conv or matmul anchor
    computes: bool = True  # does arithmetic (False: a reshape, transpose, slice: data movement only)
    # From the op's TIR (:func:`.dim_maps.split_maps`): per producer op, {output dim: (producer
    # dim, halo)} for the output dims a split of which needs only part of that producer. None
    # (hand-built graphs): same-rank inputs split along the same dim unless ``contracted``, with
    # ``window`` as the halo.
    split_maps: dict[int, dict[int, tuple[int, int]]] | None = None
    fusible: bool = True
    # producer ops whose tensor it reads at loaded indices (a gather's table, computed in the graph)
    gathers_from: frozenset[int] = frozenset()
    is_output: bool = False
    external_input_bytes: int = 0  # activation inputs from outside the graph (not weights)


class TurboGraph:
    """A DAG of :class:`TurboOp` in topological order (node id = position)."""

    def __init__(self, ops: list[TurboOp]):
        self.ops = ops
        self.consumers: list[list[int]] = [[] for _ in ops]
        for i, op in enumerate(ops):
            for p in op.inputs:
                if p >= i:
                    raise ValueError(f"op {op.name}: input {p} is not earlier in topological order")
                self.consumers[p].append(i)

    def __len__(self) -> int:
        return len(self.ops)

    def index_of(self, name: str) -> int:
        return next(i for i, op in enumerate(self.ops) if op.name == name)

    def fusible_together(self, ops) -> bool:
        """Whether ``ops`` may be one kernel: every op fusible, and no gather reading a table that
        another of them computes (the gather reads it in place at loaded indices, so it must be
        whole in memory before the kernel starts: no tile of it can stay in LB)."""
        members = set(ops)
        return all(self.ops[op].fusible and not (self.ops[op].gathers_from & members) for op in members)


def from_dataflow_graph(graph: DataflowGraph) -> TurboGraph:
    """The scheduler's view of one dataflow block (built after ``LegalizeOps``).

    Only ``call_tir`` kernels TVM does not mark opaque are fusible (reshapes and transposes are:
    their splits are followed through their TIR), and gathers
    (:func:`~tvm_fusion_ext.analysis.primitive_types.is_gather`), which TVM marks opaque but
    which move data element for element: an embedding lookup joins the layer that reads it
    (section 3.5's data movement), though never the op computing its table
    (:meth:`TurboGraph.fusible_together`). A conv contracts its input's channel axis (1) and windows
    its spatial axes by ``kernel - 1`` (read off the weight argument); a matmul contracts its
    input's last axis; a reduction contracts every axis it removes (approximated: all axes). How a
    split of each op's output splits each producer's tensor is read off its TIR
    (:func:`.dim_maps.split_maps`), which also follows reshapes and transposes.
    """
    ops = []
    defined = {b.var for b in graph.bindings}
    for node in graph.nodes:
        shape = node.shapes[0] if node.shapes else ()
        contracted, window = frozenset(), {}
        if node.ptype == PrimitiveType.CONV:
            contracted = frozenset({1})
            kernel = _conv_kernel(graph, node.index)
            window = {axis: k - 1 for axis, k in zip((2, 3), kernel) if k > 1}
        elif node.ptype == PrimitiveType.MATMUL:
            contracted = frozenset({max(len(shape) - 1, 0)})
        elif node.ptype == PrimitiveType.REDUCTION:
            contracted = frozenset(range(len(shape) + 1))
        gather = node.kind == NodeKind.CALL_TIR and is_gather(node.prim_func)
        gathers_from = _gathered_producers(graph, node.index) if gather else frozenset()
        ops.append(TurboOp(
            name=node.name, shape=tuple(shape), out_bytes=node.out_bytes, inputs=list(node.inputs),
            flops=max(node.flops, 1), contracted=contracted, window=window,
            anchor=node.ptype in (PrimitiveType.CONV, PrimitiveType.MATMUL, PrimitiveType.REDUCTION),
            contraction=node.ptype in (PrimitiveType.CONV, PrimitiveType.MATMUL),
            computes=node.kind != NodeKind.CALL_TIR or node.flops > 0,
            split_maps=_split_maps(graph, node.index),
            fusible=node.kind == NodeKind.CALL_TIR and (node.pattern != OpPattern.OPAQUE or gather),
            gathers_from=gathers_from,
            is_output=node.is_block_output,
            external_input_bytes=_external_input_bytes(graph, node.index, defined)))
    return TurboGraph(ops)


def _gathered_producers(graph: DataflowGraph, index: int) -> frozenset[int]:
    """The producer nodes whose tensors a gather reads at loaded indices (its table)."""
    node = graph.nodes[index]
    if not graph.bindings or node.prim_func is None:
        return frozenset()
    args = list(graph.bindings[index].value.args[1].fields)
    tables = {r.source for block in prim_func_blocks(node.prim_func) for r in block.reads
              if indexed_by_data(r)}
    producer = {graph.bindings[p].var: p for p in node.inputs}
    return frozenset(producer[arg] for param, arg in zip(node.prim_func.params, args)
                     if arg in producer and any(param.same_as(t) for t in tables))


def _split_maps(graph: DataflowGraph, index: int) -> dict[int, dict[int, tuple[int, int]]] | None:
    """:func:`.dim_maps.split_maps` of a ``call_tir`` node, keyed by producer node."""
    node = graph.nodes[index]
    if node.kind != NodeKind.CALL_TIR or node.prim_func is None or not graph.bindings:
        return None
    args = list(graph.bindings[index].value.args[1].fields)
    if len(node.prim_func.params) != len(args) + 1:
        return None
    maps = split_maps(node.prim_func, len(args))
    producer = {graph.bindings[p].var: p for p in node.inputs}
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for arg, mapping in zip(args, maps):
        if arg in producer:
            out[producer[arg]] = mapping
    return out


def _external_input_bytes(graph: DataflowGraph, index: int, defined: set) -> int:
    """Bytes of the vars from outside the block a binding reads (function parameters, earlier
    blocks); constants are weights and not counted."""
    if not graph.bindings:
        return 0
    value = graph.bindings[index].value
    args = value.args[1].fields if graph.nodes[index].kind == NodeKind.CALL_TIR else []
    return sum(tensor_bytes(a.ty) for a in args if isinstance(a, relax.Var) and a not in defined)


def _conv_kernel(graph: DataflowGraph, index: int) -> tuple[int, ...]:
    """Spatial kernel size of a legalized conv2d: the trailing dims of its 4-D weight argument."""
    if not graph.bindings:
        return ()
    args = graph.bindings[index].value.args[1].fields
    for arg in args[1:]:
        shape = getattr(arg.ty, "shape", None)
        if shape is not None and len(shape.values) == 4:
            try:
                return tuple(int(v) for v in shape.values[2:])
            except TypeError:
                return ()
    return ()

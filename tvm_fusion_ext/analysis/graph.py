"""A graph view of one Relax dataflow block: the common input of every partitioner.

Build it after ``LegalizeOps`` + ``AnnotateTIROpPattern``. Each binding of the block is a node:
``call_tir`` / ``call_tir_inplace`` calls carry their PrimFunc, TVM's op-pattern kind, APOLLO type
(:mod:`.primitive_types`), output shapes, dtypes, bytes and a FLOP estimate; tuples, tuple-get-items
and anything else (``call_dps_packed``, ``match_cast``, ...) are nodes too, so a partition covers
every binding. Edges follow data use inside the block; values defined outside the block (function
parameters, constants, earlier blocks) are not nodes.

The graph is plain Python (node ids are binding positions), so partitioners built on it are testable
on hand-made graphs: :meth:`DataflowGraph.from_edges` builds one without any IR.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, tirx

from .primitive_types import OpClassification, PrimitiveType, classify_prim_func

# Partitioners' hooks for a profitability check (tvm_fusion_ext.cost.ProfitabilityCheck): whether
# disjoint groups of a graph may become one kernel, and the seconds merging them saves (None: no
# prediction, the partitioner's own estimate stands).
MergeCheck = Callable[["DataflowGraph", list[frozenset[int]]], bool]
MergeGain = Callable[["DataflowGraph", list[frozenset[int]]], "float | None"]

# PrimFunc attributes of the pieces of an opened compound op (APOLLO section 3.2, written by
# tvm_fusion_ext/relax_passes/open_compound_ops.py): the compound op's PrimFunc name, and the
# piece's position among its loop nests.
COMPOUND_OP_ATTR = "tvm_fusion_ext.compound_op"
COMPOUND_PIECE_ATTR = "tvm_fusion_ext.compound_piece"


class OpPattern(enum.IntEnum):
    """TVM's ``OpPatternKind`` (the ``op_pattern`` attribute set by ``AnnotateTIROpPattern``)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_EWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class NodeKind(enum.Enum):
    CALL_TIR = "call_tir"
    TUPLE = "tuple"
    TUPLE_GET_ITEM = "tuple_get_item"
    OTHER = "other"  # call_dps_packed, match_cast, high-level ops, constants bound to vars, ...


@dataclass
class OpNode:
    """One binding of the dataflow block."""

    index: int
    name: str
    kind: NodeKind
    pattern: OpPattern
    inputs: list[int] = field(default_factory=list)  # producer nodes, in argument order, unique
    outputs: list[int] = field(default_factory=list)  # consumer nodes, in binding order, unique
    is_block_output: bool = False  # its var is visible after the block (not a DataflowVar)
    callee: str | None = None  # the PrimFunc's global name, for call_tir
    prim_func: tirx.PrimFunc | None = None
    classification: OpClassification | None = None
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    out_bytes: int = 0
    inplace: bool = False

    @property
    def ptype(self) -> PrimitiveType:
        """APOLLO primitive type; non-call_tir nodes are opaque (they are never fused into kernels)."""
        if self.classification is None:
            return PrimitiveType.OPAQUE
        return self.classification.ptype

    @property
    def flops(self) -> int:
        return self.classification.flops if self.classification else 0

    @property
    def compound_piece(self) -> tuple[str, int] | None:
        """``(compound op, piece position)`` when this call is a piece of an opened compound op."""
        attrs = self.prim_func.attrs if self.prim_func is not None else None
        if not attrs or COMPOUND_OP_ATTR not in attrs:
            return None
        return str(attrs[COMPOUND_OP_ATTR]), int(attrs[COMPOUND_PIECE_ATTR])

    @property
    def becomes_view(self) -> bool:
        """A reshape kernel (one input, the same elements in the same row-major order) whose result
        stays in the block: ``RewriteDataflowReshape`` turns its call into ``R.reshape``, a view the
        VM makes without a kernel or a copy (TVM src/relax/transform/rewrite_dataflow_reshape.cc)."""
        func = self.prim_func
        if self.kind is not NodeKind.CALL_TIR or self.is_block_output or func is None or len(func.params) != 2:
            return False
        source, result = func.params
        elements = _elements(source.shape)
        return (str(source.dtype) == str(result.dtype) and elements is not None
                and elements == _elements(result.shape) and relax.analysis.has_reshape_pattern(func))

    @property
    def fusible(self) -> bool:
        """Only kernels and the tuple plumbing around them can go into a fused function."""
        return self.kind in (NodeKind.CALL_TIR, NodeKind.TUPLE, NodeKind.TUPLE_GET_ITEM)


class DataflowGraph:
    """A DAG over the bindings of one dataflow block (node id = binding position)."""

    def __init__(self, nodes: list[OpNode], func_name: str = "main", block_index: int = 0,
                 bindings: list | None = None):
        self.nodes = nodes
        self.func_name = func_name
        self.block_index = block_index
        self.bindings = bindings or []
        for node in nodes:
            for producer in node.inputs:
                if node.index not in nodes[producer].outputs:
                    nodes[producer].outputs.append(node.index)
        for node in nodes:
            node.outputs.sort()

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        edges = [(p, n.index) for n in self.nodes for p in n.inputs]
        return f"DataflowGraph({self.func_name}[{self.block_index}], {len(self)} nodes, edges={edges})"

    # ---- construction without IR (for algorithm tests) ----------------------------------------
    @classmethod
    def from_edges(cls, types: dict[str, PrimitiveType | str], edges: Iterable[tuple[str, str]],
                   outputs: Iterable[str] = (), patterns: dict[str, OpPattern] | None = None,
                   flops: dict[str, int] | None = None, out_bytes: dict[str, int] | None = None
                   ) -> DataflowGraph:
        """A hand-built graph: node names in ``types`` order (a topological order), edges by name.

        Node types may be given as :class:`PrimitiveType` or its value string. ``outputs`` are the
        nodes visible after the block. Patterns default to TVM's kind for the APOLLO type.
        """
        names = list(types)
        pos = {n: i for i, n in enumerate(names)}
        nodes = []
        for i, name in enumerate(names):
            ptype = PrimitiveType(types[name])
            pattern = (patterns or {}).get(name, _PATTERN_OF_TYPE[ptype])
            node_flops = (flops or {}).get(name, 1)
            classification = OpClassification(ptype, (), node_flops)
            nodes.append(OpNode(i, name, NodeKind.CALL_TIR, pattern, classification=classification,
                                out_bytes=(out_bytes or {}).get(name, 4), callee=name))
        for src, dst in edges:
            if pos[src] >= pos[dst]:
                raise ValueError(f"edge {src}->{dst} goes against the given topological order")
            if pos[src] not in nodes[pos[dst]].inputs:
                nodes[pos[dst]].inputs.append(pos[src])
        for name in outputs:
            nodes[pos[name]].is_block_output = True
        return cls(nodes, func_name="hand_built")

    # ---- queries -----------------------------------------------------------------------------
    def index_of(self, name: str) -> int:
        for node in self.nodes:
            if node.name == name:
                return node.index
        raise KeyError(name)

    def topological_order(self) -> list[int]:
        """Binding order is a topological order of a dataflow block."""
        return list(range(len(self.nodes)))

    def reachable_from(self, sources: Iterable[int]) -> set[int]:
        """Nodes reachable from ``sources`` along data edges (sources included)."""
        seen, stack = set(), list(sources)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(self.nodes[n].outputs)
        return seen

    def merge_creates_cycle(self, group_a: Iterable[int], group_b: Iterable[int]) -> bool:
        """Would fusing the two groups into one kernel create a cycle between kernels?

        It does exactly when a path leaves the union and comes back into it: some node outside the
        union is reachable from the union and reaches the union again.
        """
        union = set(group_a) | set(group_b)
        frontier = {o for n in union for o in self.nodes[n].outputs if o not in union}
        downstream = self.reachable_from(frontier)
        return any(p in downstream for n in union for p in self.nodes[n].inputs)

    def group_is_convex(self, group: Iterable[int]) -> bool:
        """A group can become one kernel iff no path leaves it and comes back (no cycle)."""
        group = set(group)
        return not self.merge_creates_cycle(group, ())

    def connected_parts(self, nodes: Iterable[int]) -> list[list[int]]:
        """``nodes`` split into the parts their data edges among them connect (either direction),
        each sorted, in order of their first node."""
        nodes = set(nodes)
        parts, seen = [], set()
        for start in sorted(nodes):
            if start in seen:
                continue
            part, stack = set(), [start]
            while stack:
                n = stack.pop()
                if n not in part:
                    part.add(n)
                    stack.extend(m for m in (*self.nodes[n].inputs, *self.nodes[n].outputs) if m in nodes)
            seen |= part
            parts.append(sorted(part))
        return parts

    def groups_are_acyclic(self, groups: Iterable[Iterable[int]]) -> bool:
        """Whether the kernels of ``groups`` (each convex; nodes in no group are kernels of their
        own) can run in some order: no two groups depend on each other, even through others."""
        groups = [list(g) for g in groups]
        owner = {m: gi for gi, g in enumerate(groups) for m in g}
        node_group = [owner.get(n.index, len(groups) + n.index) for n in self.nodes]
        deps: dict[int, set[int]] = {}
        for node in self.nodes:
            for p in node.inputs:
                if node_group[p] != node_group[node.index]:
                    deps.setdefault(node_group[node.index], set()).add(node_group[p])
        state: dict[int, int] = {}  # 1: on the search path, 2: done
        for start in list(deps):
            if start in state:
                continue
            state[start] = 1
            stack = [(start, iter(deps.get(start, ())))]
            while stack:
                g, pending = stack[-1]
                d = next(pending, None)
                if d is None:
                    state[g] = 2
                    stack.pop()
                elif state.get(d) == 1:
                    return False
                elif d not in state:
                    state[d] = 1
                    stack.append((d, iter(deps.get(d, ()))))
        return True

    def post_dominators(self) -> list[int | None]:
        """Immediate post-dominator of each node (``None``: the virtual exit).

        Built by LCA over consumers in reverse topological order, as TVM's ``DominatorTree::PostDom``
        does on a DAG. Nodes visible after the block, and nodes nobody uses, are post-dominated only
        by the exit.
        """
        return _lca_tree(self.nodes, reversed(self.topological_order()),
                         lambda n: [] if n.is_block_output else n.outputs)

    def pre_dominators(self) -> list[int | None]:
        """Immediate pre-dominator of each node (``None``: the virtual entry), by LCA over inputs.

        The mirror image of :meth:`post_dominators` (tvm-backward-operator-fusion section 5): a node
        whose producers all come from outside the block is dominated only by the entry.
        """
        return _lca_tree(self.nodes, self.topological_order(), lambda n: n.inputs)


def _lca_tree(nodes: list[OpNode], order, neighbours) -> list[int | None]:
    """Dominator tree of a DAG by least common ancestor over already-processed neighbours."""
    parent: list[int | None] = [None] * len(nodes)
    depth = [0] * len(nodes)

    def lca(a, b):
        while a != b:
            if a is None or b is None:
                return None
            if depth[a] >= depth[b]:
                a = parent[a]
            else:
                b = parent[b]
        return a

    for n in order:
        adj = list(neighbours(nodes[n]))
        if not adj:
            parent[n], depth[n] = None, 1
            continue
        p = adj[0]
        for other in adj[1:]:
            p = lca(p, other)
        parent[n] = p
        depth[n] = depth[p] + 1 if p is not None else 1
    return parent


_PATTERN_OF_TYPE = {
    PrimitiveType.ELEMENTWISE: OpPattern.ELEMWISE,
    PrimitiveType.BROADCAST: OpPattern.BROADCAST,
    PrimitiveType.REDUCTION: OpPattern.COMM_REDUCE,
    PrimitiveType.TRANSPOSE: OpPattern.INJECTIVE,
    PrimitiveType.MATMUL: OpPattern.OUT_EWISE_FUSABLE,
    PrimitiveType.CONV: OpPattern.OUT_EWISE_FUSABLE,
    PrimitiveType.OPAQUE: OpPattern.OPAQUE,
    PrimitiveType.RESHAPE: OpPattern.INJECTIVE,
    PrimitiveType.DATA_MOVEMENT: OpPattern.INJECTIVE,
}


# --------------------------------------------------------------------------------------------
# Building the view from Relax
# --------------------------------------------------------------------------------------------
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CALL_TIR_INPLACE = tvm.ir.Op.get("relax.call_tir_inplace")


def _elements(shape) -> int | None:
    """Elements of a static buffer shape; ``None`` when a dimension is symbolic."""
    if not all(isinstance(dim, tirx.IntImm) for dim in shape):
        return None
    return int(np.prod([int(dim) for dim in shape], dtype=np.int64))


def tensor_bytes(ty) -> int:
    """Bytes of a static tensor type, or the sum over a tuple type; 0 for non-tensors/symbolic."""
    if isinstance(ty, relax.TupleType):
        return sum(tensor_bytes(field) for field in ty.fields)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return 0
    try:
        elems = int(np.prod([int(d) for d in ty.shape.values]))
    except TypeError:
        return 0
    return elems * tvm.runtime.DataType(str(ty.dtype)).bits // 8


def static_shape(ty) -> tuple[int, ...] | None:
    """The shape of a tensor type as ints, or None when it is not a tensor or not static."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except TypeError:
        return None


def shape_without_axis(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` with dimension ``axis`` (negative counts from the end) removed."""
    axis = axis % len(shape)
    return shape[:axis] + shape[axis + 1:]


def _tensor_types(ty) -> list:
    if isinstance(ty, relax.TupleType):
        return [t for f in ty.fields for t in _tensor_types(f)]
    return [ty] if isinstance(ty, relax.TensorType) else []


def used_vars(expr) -> list[relax.Var]:
    """Vars used by ``expr``, in order of first appearance."""
    seen = []
    relax.analysis.post_order_visit(
        expr, lambda e: seen.append(e) if isinstance(e, relax.Var) and e not in seen else None)
    return seen


def build_graph(mod: tvm.IRModule, func_name: str = "main", block_index: int | None = None
                ) -> DataflowGraph:
    """Graph view of one dataflow block of ``mod[func_name]`` (the first one by default)."""
    graphs = build_graphs(mod, func_name)
    if not graphs:
        raise ValueError(f"function {func_name!r} has no dataflow block")
    if block_index is None:
        return graphs[0]
    for graph in graphs:
        if graph.block_index == block_index:
            return graph
    raise ValueError(f"function {func_name!r} has no dataflow block at position {block_index}")


def build_graphs(mod: tvm.IRModule, func_name: str = "main") -> list[DataflowGraph]:
    """Graph views of every dataflow block of ``mod[func_name]``, in program order."""
    func = mod[func_name]
    if not isinstance(func, relax.Function):
        raise TypeError(f"{func_name!r} is not a Relax function")
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    used_later = _vars_used_after(body)
    packed = _packed_params(func)
    return [_block_graph(mod, func_name, i, block, used_later[i], packed)
            for i, block in enumerate(body.blocks) if isinstance(block, relax.DataflowBlock)]


def _packed_params(func: relax.Function) -> set:
    """Parameters after the function's ``num_input`` attribute (packed weights, as FuseOps'
    ``GraphCreator`` calls them): a tuple-get-item of one is opaque, so weight unpacking never fuses."""
    num_input = (func.attrs or {}).get("num_input")
    return set() if num_input is None else set(list(func.params)[int(num_input):])


def _vars_used_after(body: relax.SeqExpr) -> list[set]:
    """For each block, the vars used by later blocks or by the function's result."""
    used_after = [set() for _ in body.blocks]
    acc = set(used_vars(body.body))
    for i in range(len(body.blocks) - 1, -1, -1):
        used_after[i] = set(acc)
        for binding in body.blocks[i].bindings:
            acc.update(used_vars(binding.value))
    return used_after


def _block_graph(mod, func_name, block_index, block, used_later, packed_params) -> DataflowGraph:
    bindings = list(block.bindings)
    position = {b.var: i for i, b in enumerate(bindings)}
    nodes = []
    for i, binding in enumerate(bindings):
        node = _make_node(mod, i, binding, packed_params)
        for var in used_vars(binding.value):
            producer = position.get(var)
            if producer is not None and producer < i and producer not in node.inputs:
                node.inputs.append(producer)
        node.is_block_output = (not isinstance(binding.var, relax.DataflowVar)) or binding.var in used_later
        nodes.append(node)
    return DataflowGraph(nodes, func_name, block_index, bindings)


def _make_node(mod: tvm.IRModule, index: int, binding, packed_params: set) -> OpNode:
    var = binding.var
    tensors = _tensor_types(var.ty)
    shapes = tuple(s for s in (static_shape(t) for t in tensors) if s is not None)
    dtypes = tuple(str(t.dtype) for t in tensors)
    common = {"index": index, "name": var.name, "shapes": shapes, "dtypes": dtypes,
              "out_bytes": tensor_bytes(var.ty)}
    value = binding.value
    if isinstance(binding, relax.MatchCast):
        return OpNode(kind=NodeKind.OTHER, pattern=OpPattern.OPAQUE, **common)
    if isinstance(value, relax.Call) and (value.op.same_as(_CALL_TIR) or value.op.same_as(_CALL_TIR_INPLACE)):
        gvar = value.args[0]
        func = mod[gvar]
        pattern = OpPattern(int(func.attrs["op_pattern"])) if func.attrs and "op_pattern" in func.attrs \
            else OpPattern.OPAQUE
        return OpNode(kind=NodeKind.CALL_TIR, pattern=pattern, callee=gvar.name_hint, prim_func=func,
                      classification=classify_prim_func(func),
                      inplace=value.op.same_as(_CALL_TIR_INPLACE), **common)
    if isinstance(value, relax.TupleGetItem):
        pattern = OpPattern.OPAQUE if value.tuple_value in packed_params else OpPattern.INJECTIVE
        return OpNode(kind=NodeKind.TUPLE_GET_ITEM, pattern=pattern, **common)
    if isinstance(value, relax.Tuple):
        return OpNode(kind=NodeKind.TUPLE, pattern=OpPattern.OPAQUE, **common)
    return OpNode(kind=NodeKind.OTHER, pattern=OpPattern.OPAQUE, **common)

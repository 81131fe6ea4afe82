"""Dominator-tree operator fusion: TVM's ``GraphPartitioner`` (forward), its mirror (backward), both.

**Forward** is a line-for-line port of Relax ``FuseOps``' partitioner
(``src/relax/analysis/graph_partitioner.cc``: ``GraphPartitioner::Partition``, ``RunFuse``,
``CheckPath``, ``CommitFuse``, ``MergeFromTo``, ``CountFusedNodesWithNewChild``; the dominator
tree's aggregated edge pattern from ``DominatorTree::GetNode`` / ``LeastCommonAncestor``), over the
shared graph view. Each node, in topological order, tries to join its immediate post-dominator
(tvm-backward-operator-fusion section 4), in three phases:

* phase 0: a kOutEWiseFusable node (conv, matmul) joins an element-wise post-dominator when every
  op on the way is at most broadcast; an element-wise / broadcast node joins a post-dominator whose
  edge pattern is injective or a reduction, through injective ops, into any fusable sink;
* phase 1: injective nodes join an injective post-dominator through injective ops (and phase 0's
  element-wise rule runs again);
* phase 2: injective nodes join an intermediate tuple (Relax's graph has no kTuple nodes - a tuple
  binding is opaque, as in ``GraphCreator`` - so this only acts on hand-built graphs).

A reduction never starts a fusion; opaque nodes never fuse; a node used after the block has no
post-dominator; a fusion is refused when the fused group would exceed ``max_depth`` nodes. FuseOps
calls the partitioner with ``max_function_args = 0``, which switches the argument-count limit and its
postponed fusions off, so those parts are not ported. With ``opt_level == 0`` nothing fuses.

**Backward** (section 5 of the paper) is forward fusion of the reversed DAG: nodes are tried in
reverse topological order, each joining its immediate *pre*-dominator
(:meth:`DataflowGraph.pre_dominators`); ``CheckPath`` / ``CommitFuse`` walk inputs instead of
outputs, and the aggregated edge pattern is that of the ops between the node and its pre-dominator,
the pre-dominator included (forward: the post-dominator included). The rules are forward's, read
with producer and consumer swapped (the paper keeps "the framework from forward fusion", section 7):

* phase 0, a conv / matmul joins its pre-dominator when that op and every op between are
  element-wise (group patterns at most broadcast): it takes in its element-wise prologue;
* phases 0-1, an element-wise / broadcast op joins a pre-dominator that is a reduction or at most
  injective, through injective ops (the pre-dominator's group may already hold a conv / matmul): the
  element-wise epilogue of a reduction, or element-wise chains;
* phase 1, an injective op joins an injective pre-dominator through injective ops;
* a reduction never starts a fusion, so it never takes its producers in; opaque ops never fuse.

Read so, backward fusion gives no conv / matmul its epilogue (the paper, section 6: it "was fusing
significantly fewer operators than the forward method"); an unrolled LSTM then runs 425 kernels
where FuseOps runs 170, at 0.57x its speed. With ``epilogues`` (the default) one rule is added, the
paper's first item of future work (section 7: "altering the fusing rules" to "allow more operator
fusion"): an element-wise / broadcast op joins a pre-dominator that is a conv / matmul
group through element-wise and broadcast ops, the epilogue forward gives the contraction, found
from the consumer's side, or, failing that, the groups producing its inputs whose results it alone
reads, each a conv / matmul group or element-wise / broadcast only (the op post-dominates such a
group directly, as forward would fuse it). This reaches a residual add, whose pre-dominator lies
beyond the conv because it reads the block's input too, and an LSTM cell's ``f * c``, whose inputs
come from two steps (no pre-dominator in the block): without it, an unrolled LSTM keeps one kernel
per gate activation and per product. Forward's phase 1 is found from the consumer's side the same
way: an injective op, or an element-wise one outside a conv / matmul group, joins the groups of at
most injective ops whose results it alone reads (a U-Net's upsampling joins the concatenation with
the skip connection, whose pre-dominator lies above the encoder's convs). These epilogue joins
run before the three phases, in topological order, so that an element-wise op between two convs
becomes the first one's epilogue and not, by the mirrored prologue rule, the second one's
prologue, recomputed at every window position (SiLU's multiply before EfficientNet's next conv). ``epilogues=False`` keeps the mirrored rules alone.

Function parameters and constants are not nodes of the graph view, so they do not count as
predecessors: an op reading a weight still has the in-block producer of its activation as
pre-dominator. Every group is something ``FuseTIR`` compiles to one correct PrimFunc: only
``call_tir`` and tuple-get-item bindings join (every other binding is opaque), and two guards, the
mirrors of the invariants forward keeps by construction (``CombinePattern``'s "cannot merge two
complex groups" check and ``OperatorFusor``'s cyclic-dependency check), refuse a backward fusion
that would put two complex ops (kOutEWiseFusable or kCommReduce) in one group or make a group
non-convex (a path leaving it and coming back, i.e. a cycle between kernels). A third guard keeps a
tuple-valued op (``split``) together with all of its tuple-get-items once it is in a backward-made
group: forward never separates them (they all lie before the post-dominator), and ``FuseTIR``
cannot lower a group returning the tuple next to one of its items. A backward fusion that takes in
a tuple-valued op therefore takes its items that are still alone in their groups with it (an item
is a view of the tuple and costs nothing): otherwise no first step could take a ``split`` with one
item, and each ``split`` would stay a kernel of its own (a copy of its whole input: ShuffleNetV2's
channel split).

With a profitability check (``accept``, e.g. :class:`~tvm_fusion_ext.cost.ProfitabilityCheck`), a backward fusion
the rules and guards allow is also refused when the merged group's kernel is predicted slower than
the kernels of the groups it merges: the paper's backward rules mirror forward's without asking
what the schedule makes of the result (a prologue pulled in front of a contraction, say). Forward
fusion is TVM's and is never checked.

**Both** (section 7, item 2) runs forward, then backward over the forward groups (the same
union-find, guarded the same way). Fusion only ever merges groups, so "both" never has more kernels
than forward, and the convexity guard keeps it free of cycles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..analysis.graph import DataflowGraph, MergeCheck, NodeKind, OpPattern

FORWARD, BACKWARD, BOTH = "forward", "backward", "both"
DIRECTIONS = (FORWARD, BACKWARD, BOTH)
MAX_FUSED_OPS = 256  # kMaxFusedOps in src/relax/transform/fuse_ops.cc

_COMPLEX = (OpPattern.COMM_REDUCE, OpPattern.OUT_EWISE_FUSABLE)

PathCondition = Callable[[OpPattern, bool], bool]


def _injective_path(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.INJECTIVE


def _broadcast_path(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.BROADCAST


def _epilogue_of_anchor(kind: OpPattern, is_sink: bool) -> bool:
    """Backward epilogue: element-wise / broadcast ops on the way, a conv / matmul group as the sink."""
    return kind == OpPattern.OUT_EWISE_FUSABLE if is_sink else kind <= OpPattern.BROADCAST


def _elemwise_into_anchor(kind: OpPattern, is_sink: bool) -> bool:
    """Element-wise / broadcast source: injective ops on the way, any fusable kind as the sink."""
    if not is_sink:
        return kind <= OpPattern.INJECTIVE
    return (kind <= OpPattern.BROADCAST or kind == OpPattern.COMM_REDUCE
            or kind == OpPattern.INJECTIVE or kind == OpPattern.OUT_EWISE_FUSABLE)


class _Group:
    """``GraphPartitioner::Group``: a union-find node with the group's pattern and size."""

    __slots__ = ("anchor", "members", "num_nodes", "parent", "pattern")

    def __init__(self, node: int, pattern: OpPattern):
        self.parent: _Group | None = None
        self.pattern = pattern
        self.anchor = pattern == OpPattern.OUT_EWISE_FUSABLE  # anchor_ref != nullptr
        self.num_nodes = 1
        self.members = [node]  # kept on roots only

    def find_root(self) -> _Group:
        """``Group::FindRoot`` with path compression."""
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node is not root:
            node.parent, node = root, node.parent
        return root


@dataclass(frozen=True)
class _Orientation:
    """One orientation of the DAG: the edges walked, the dominator tree and the visiting order."""

    succ: list[list[int]]  # forward: consumers; backward: producers
    dom: list[int | None]  # immediate post- (forward) or pre- (backward) dominator
    dom_pattern: list[OpPattern]  # DominatorTree::Node::pattern, the aggregated edge pattern
    order: list[int]  # the order RunFuse tries the nodes in
    guarded: bool  # refuse fusions that break convexity or put two complex ops together


def _dom_patterns(graph: DataflowGraph, succ, dom, build_order) -> list[OpPattern]:
    """Aggregated edge pattern of each node up to its dominator (``DominatorTree::GetNode``).

    An edge carries its consumer's pattern (``GraphCreator::AddEdge``); the pattern of a node is the
    combination of its edges' patterns and of the tree patterns climbed by ``LeastCommonAncestor``
    from each successor up to the dominator. Computed from the shared dominator tree, in the order
    the tree was built (dominators before the nodes they dominate).
    """
    patterns = [n.pattern for n in graph.nodes]
    tree = [OpPattern.OPAQUE] * len(graph)
    for x in build_order:
        parent = dom[x]
        if parent is None:
            continue
        acc = OpPattern.ELEMWISE
        for s in succ[x]:
            acc = max(acc, patterns[s])
            y = s
            while y != parent:
                acc = max(acc, tree[y])
                y = dom[y]
        tree[x] = OpPattern(acc)
    return tree


def _forward(graph: DataflowGraph) -> _Orientation:
    succ = [list(n.outputs) for n in graph.nodes]
    dom = graph.post_dominators()
    order = graph.topological_order()
    return _Orientation(succ, dom, _dom_patterns(graph, succ, dom, order[::-1]), order, False)


def _backward(graph: DataflowGraph) -> _Orientation:
    succ = [list(n.inputs) for n in graph.nodes]
    dom = graph.pre_dominators()
    topo = graph.topological_order()
    return _Orientation(succ, dom, _dom_patterns(graph, succ, dom, topo), topo[::-1], True)


class DominatorPartitioner:
    """A partitioner (``graph -> groups``) for :class:`MaterializePartition`; see the module doc.

    ``direction`` is ``"forward"`` (Relax FuseOps), ``"backward"`` or ``"both"``; ``opt_level`` 0
    disables fusion (FuseOps' ``fuse_opt_level``); ``max_depth`` bounds the nodes of a group
    (``relax.FuseOps.max_depth``); ``accept`` checks backward fusions; ``epilogues`` lets backward
    fusion give a conv / matmul its element-wise epilogue (module docstring).
    """

    def __init__(self, direction: str = FORWARD, opt_level: int = 2, max_depth: int = MAX_FUSED_OPS,
                 accept: MergeCheck | None = None, epilogues: bool = True):
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}")
        self.direction = direction
        self.opt_level = opt_level
        self.max_depth = max_depth
        self.accept = accept
        self.epilogues = epilogues

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        return _Partition(graph, self.max_depth, self.accept, self.epilogues).run(self.direction, self.opt_level)


def dominator_groups(graph: DataflowGraph, direction: str = FORWARD, opt_level: int = 2,
                     max_depth: int = MAX_FUSED_OPS, epilogues: bool = True) -> list[list[int]]:
    """The multi-node groups of ``graph`` under ``direction``, each sorted, ordered by first node."""
    return DominatorPartitioner(direction, opt_level, max_depth, epilogues=epilogues)(graph)


class _Partition:
    """The state of one ``GraphPartitioner::Partition`` run over one graph."""

    def __init__(self, graph: DataflowGraph, max_depth: int, accept: MergeCheck | None = None,
                 epilogues: bool = True):
        self.graph = graph
        self.max_depth = max_depth
        self.accept = accept
        self.epilogues = epilogues
        self.groups = [_Group(n.index, n.pattern) for n in graph.nodes]  # InitGroups

    def run(self, direction: str, opt_level: int) -> list[list[int]]:
        """``GraphPartitioner::Partition``: three phases per orientation, then the groups."""
        if opt_level != 0:
            orientations = {FORWARD: [_forward], BACKWARD: [_backward],
                            BOTH: [_forward, _backward]}[direction]
            for make in orientations:
                orientation = make(self.graph)
                if orientation.guarded and self.epilogues:
                    # Epilogues first, producers before consumers, so that an element-wise op
                    # between two convs is the first one's epilogue, not the second one's
                    # prologue (recomputed for every window position of the second conv).
                    for nid in self.graph.topological_order():
                        self._join_epilogue(orientation, nid)
                for phase in range(3):
                    self._run_fuse(orientation, phase)
        roots = {id(g.find_root()): g.find_root() for g in self.groups}
        return sorted((sorted(r.members) for r in roots.values() if r.num_nodes > 1),
                      key=lambda members: members[0])

    # ---- GraphPartitioner::RunFuse -----------------------------------------------------------
    def _run_fuse(self, o: _Orientation, phase: int) -> None:
        for nid in o.order:
            group_node = self.groups[nid]
            if group_node.pattern == OpPattern.OPAQUE:
                continue
            parent = o.dom[nid]
            if parent is None:
                continue
            if self._count_fused_nodes_with_new_child(o, nid, parent) > self.max_depth:
                continue
            dom_parent_group = self.groups[parent]
            if phase == 2:
                # Fuse injective ops into intermediate tuples, if any.
                if group_node.pattern > OpPattern.INJECTIVE:
                    continue
                dom_root_group = dom_parent_group.find_root()
                if dom_root_group.pattern == OpPattern.TUPLE:
                    continue
                if (dom_parent_group.pattern == OpPattern.TUPLE
                        and dom_root_group.pattern <= OpPattern.INJECTIVE):
                    self._try_fuse(o, nid, parent, _injective_path)
                continue
            if group_node.find_root() is dom_parent_group.find_root():
                continue
            if dom_parent_group.pattern == OpPattern.TUPLE:
                continue
            if group_node.pattern == OpPattern.OUT_EWISE_FUSABLE:
                if phase == 0 and o.dom_pattern[nid] == OpPattern.ELEMWISE:
                    self._try_fuse(o, nid, parent, _broadcast_path)
            elif group_node.pattern <= OpPattern.BROADCAST:
                if o.dom_pattern[nid] <= OpPattern.INJECTIVE or o.dom_pattern[nid] == OpPattern.COMM_REDUCE:
                    self._try_fuse(o, nid, parent, _elemwise_into_anchor)
            elif group_node.pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE) and phase == 1:
                # Injective fusion waits for phase 1, so that convolutions finish fusing first.
                self._try_fuse(o, nid, parent, _injective_path)
            # A reduction (kCommReduce) never starts a fusion.

    def _join_epilogue(self, o: _Orientation, nid: int) -> None:
        """Backward's epilogue rule (module docstring) for an element-wise / broadcast op: it joins
        the conv / matmul group of its pre-dominator through element-wise and broadcast ops, else
        the groups producing its inputs whose results it alone reads; an injective op outside a
        conv / matmul group joins only the latter, when they hold no conv / matmul."""
        group = self.groups[nid].find_root()
        if self.groups[nid].pattern > OpPattern.INJECTIVE or group.pattern > OpPattern.INJECTIVE:
            return
        if self.groups[nid].pattern == OpPattern.INJECTIVE or group.pattern == OpPattern.INJECTIVE:
            self._join_sole_read_producers(nid)
            return
        parent = o.dom[nid]
        if (parent is not None and self.groups[parent].find_root().pattern == OpPattern.OUT_EWISE_FUSABLE
                and self._count_fused_nodes_with_new_child(o, nid, parent) <= self.max_depth):
            self._try_fuse(o, nid, parent, _epilogue_of_anchor)
            if self.groups[nid].find_root() is self.groups[parent].find_root():
                return
        self._join_sole_read_producers(nid)

    def _join_sole_read_producers(self, nid: int) -> None:
        """Each group that produces an input of ``nid`` and whose every other result stays inside
        it takes ``nid``'s group in, where forward fusion would fuse them (``nid`` post-dominates
        that group directly, :meth:`_fuses_as_forward`). This reaches a residual add, whose
        pre-dominator lies beyond the conv because it reads the block's input too, an LSTM
        cell's ``f * c``, whose inputs come from two steps, and a U-Net's upsampling, read only
        by the concatenation that joins it to the skip connection."""
        nodes = self.graph.nodes
        producers = dict.fromkeys(nodes[nid].inputs)  # conv / matmul groups first, as in phase 0
        for producer in sorted(producers, key=lambda p: self.groups[p].find_root().pattern
                               != OpPattern.OUT_EWISE_FUSABLE):
            group = self.groups[nid].find_root()
            source = self.groups[producer].find_root()
            if source is group or not self._fuses_as_forward(source, group):
                continue
            members = set(source.members)
            if any(nodes[m].is_block_output or not set(nodes[m].outputs) <= members | {nid}
                   for m in source.members):
                continue
            roots = self._with_tuple_items([source, group])
            if sum(r.num_nodes for r in roots) <= self.max_depth and self._safe_union(roots):
                for root in roots:
                    self._merge_from_to(root, source)

    @staticmethod
    def _fuses_as_forward(source: _Group, group: _Group) -> bool:
        """Would forward fusion fuse ``source`` into ``group``, its direct post-dominator? A conv /
        matmul group takes any group but an injective one (phase 0's element-wise epilogue; two
        complex ops are refused by :meth:`_safe_union`), element-wise / broadcast groups join
        any group, injective ones a group of at most injective ops (phase 1)."""
        if source.pattern == OpPattern.OUT_EWISE_FUSABLE:
            return group.pattern != OpPattern.INJECTIVE
        if source.pattern == OpPattern.INJECTIVE:
            return group.pattern <= OpPattern.INJECTIVE
        return source.pattern <= OpPattern.BROADCAST

    def _try_fuse(self, o: _Orientation, src: int, sink: int, fcond: PathCondition) -> None:
        if not self._check_path(o, src, sink, fcond):
            return
        if not o.guarded:
            self._commit_fuse(o, src, sink)
            return
        roots = self._with_tuple_items(list({id(r): r for r in (
            self.groups[n].find_root() for n in [*self._walk(o, src, sink), sink])}.values()))
        if self._safe_union(roots):
            for root in roots:
                self._merge_from_to(root, self.groups[sink])

    # ---- paths between a node and its dominator ----------------------------------------------
    def _walk(self, o: _Orientation, src: int, sink: int) -> list[int]:
        """Nodes on the paths from ``src`` to ``sink``: ``src`` included, ``sink`` excluded."""
        seen, stack, order = {src}, [src], []
        while stack:
            n = stack.pop()
            order.append(n)
            for s in o.succ[n]:
                if s != sink and s not in seen:
                    seen.add(s)
                    stack.append(s)
        return order

    def _check_path(self, o: _Orientation, src: int, sink: int, fcond: PathCondition) -> bool:
        """``CheckPath``: every node after ``src`` up to ``sink`` satisfies ``fcond`` (group pattern)."""
        seen: set[int] = set()
        stack = list(o.succ[src])
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if not fcond(self.groups[n].find_root().pattern, n == sink):
                return False
            if n != sink:
                stack.extend(o.succ[n])
        return True

    def _commit_fuse(self, o: _Orientation, src: int, sink: int) -> None:
        """``CommitFuse``: merge every node from ``src`` up to ``sink`` into ``sink``'s group."""
        target = self.groups[sink]
        for n in self._walk(o, src, sink):
            self._merge_from_to(self.groups[n], target)

    def _count_fused_nodes_with_new_child(self, o: _Orientation, child: int, dom_parent: int) -> int:
        """``CountFusedNodesWithNewChild``: the target group's size plus the nodes' own group sizes
        (``CountNodesUptoSink_``) from ``child`` up to ``dom_parent``."""
        upto_sink = sum(self.groups[n].num_nodes for n in self._walk(o, child, dom_parent))
        return self.groups[dom_parent].find_root().num_nodes + upto_sink

    @staticmethod
    def _merge_from_to(child: _Group, parent: _Group) -> None:
        """``MergeFromTo``: attach ``child``'s root to ``parent``'s root; an anchor (conv / matmul)
        makes the parent's pattern the combined one."""
        child, parent = child.find_root(), parent.find_root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        parent.members.extend(child.members)
        child.parent = parent
        if child.anchor:
            parent.anchor = True
            parent.pattern = max(child.pattern, parent.pattern)

    # ---- guards of the backward orientation --------------------------------------------------
    def _with_tuple_items(self, roots: list[_Group]) -> list[_Group]:
        """``roots`` and the groups of the tuple-get-items, alone in their group, of the
        tuple-valued ops among their members: a backward fusion takes them in together."""
        nodes = self.graph.nodes
        members = {m for r in roots for m in r.members}
        items = {}
        for m in members:
            for consumer in nodes[m].outputs:
                item = self.groups[consumer].find_root()
                if (consumer not in members and nodes[consumer].kind is NodeKind.TUPLE_GET_ITEM
                        and item.num_nodes == 1):
                    items[id(item)] = item
        return roots + list(items.values())

    def _safe_union(self, roots: list[_Group]) -> bool:
        """Would the union of the groups ``roots`` hold at most one complex op, stay convex, leave
        the kernels free of cycles between them and, with a profitability check, not be predicted
        slower than the groups it merges? Convex groups can still depend on each other both ways
        (``a -> c`` and ``b -> d`` with groups ``{a, d}`` and ``{b, c}``), which forward fusion
        never builds and backward fusion, merging from either side, can."""
        union = [m for r in roots for m in r.members]
        complex_ops = sum(1 for m in union if self.graph.nodes[m].pattern in _COMPLEX)
        return (complex_ops <= 1 and not self._splits_a_tuple(set(union))
                and self.graph.group_is_convex(union) and self._stays_acyclic(roots, union)
                and (self.accept is None or self.accept(self.graph, [frozenset(r.members) for r in roots])))

    def _stays_acyclic(self, roots: list[_Group], union: list[int]) -> bool:
        """Are the current groups, with ``roots`` merged into ``union``, free of cycles between
        kernels (:meth:`DataflowGraph.groups_are_acyclic`)?"""
        merged = {id(r) for r in roots}
        others = {id(root): root for root in (g.find_root() for g in self.groups)
                  if id(root) not in merged and root.num_nodes > 1}
        return self.graph.groups_are_acyclic([union, *(root.members for root in others.values())])

    def _splits_a_tuple(self, union: set[int]) -> bool:
        """Does a tuple-valued member (one read by tuple-get-items) have a consumer outside?"""
        nodes = self.graph.nodes
        for m in union:
            consumers = nodes[m].outputs
            if (any(nodes[c].kind is NodeKind.TUPLE_GET_ITEM for c in consumers)
                    and not union.issuperset(consumers)):
                return True
        return False

"""NeoFlow's fusion reward and greedy fusion (neoflow-training-compilation section 5.1).

Eq. (4) scores a fusion decision optimistically, in seconds saved::

    R = dT / Pd + dC / Pc + dK * L

``dT`` bytes of data transfer removed, ``dC`` FLOPs removed (negative when the fusion recomputes),
``dK`` kernel launches removed; ``Pd``, ``Pc``, ``L`` are the device's peak bandwidth, peak compute
and launch overhead (:class:`~tvm_fusion_ext.hardware.device_costs.DeviceCosts`). A decision with
``R <= 0`` is refused even under the optimistic assumption.

Two levels:

* :func:`fig6_delta` is Fig. 6's analysis of fusing two single-output operators of a *training*
  graph, by the fan-in of each (``One``: one input, ``Many``: several), with the forward/backward
  coupling: removing the intermediate ``B`` in the forward pass also removes its gradient ``gB``
  in the backward pass, and a ``Many`` consumer needs ``B`` to differentiate its other inputs, so
  ``B`` must be recomputed there. The figure itself is not in our copy of the paper; the rows
  below are rebuilt from the text's observations (each holds exactly): One+One removes 4 T_B and
  adds no computation; One+Many and Many+One remove 4-5 tensors' transfers at the cost of one
  operation; Many+Many adds one forward and one backward operation and saves transfer only if
  ``6 T_B > T_D + T_E`` (the producer's inputs ``D``, ``E`` read again to recompute ``B``).
* :class:`RewardModel` scores merging two groups of an explicit :class:`DataflowGraph` (an inference
  graph, or a training step whose backward operators are in the graph): the bytes of tensors that
  stop crossing a kernel boundary, one launch, and the recomputation a consumer that *reuses* its
  input (matmul, conv: every input element feeds many outputs) forces on a producer fused into it
  (the "Many" consumer case). Tensors still needed outside the merged group (for instance saved
  for the backward pass) stay materialised and only their read is saved: that is the coupling.

:class:`GreedyRewardPartitioner` merges, at each step, the adjacent pair of groups with the best
positive reward ("chooses the decision with the best reward greedily"), and any partitioner can use
:meth:`RewardModel.profitable` as a filter.

With ``predicted_gain`` (:class:`~tvm_fusion_ext.cost.ProfitabilityCheck`), the reward of a merge is the time it is
predicted to save as the schedule will make the kernels, ``T(a) + T(b) - T(a + b)`` (every ``T``
the cost model's time of a group's scheduled kernel), instead of Eq. (4)'s peak-rate terms, so the
greedy search stops where the schedule degrades (a kernel holding two contractions, a whole
recurrent cell). The peak-rate reward, an optimistic bound, still admits and orders the
candidates (a pair it refuses is never predicted): a pair is predicted only when it reaches the
top of the queue, and goes back in with its predicted reward (lazy greedy evaluation), so only the
pairs the search may take are fused and scheduled. Where the model has no prediction (symbolic
shapes), Eq. (4) as written decides.

The recomputation term is where Eq. (4) stops being an optimistic bound: it charges a reusing
consumer (``P·V`` reads each softmax output ``head`` times) with recomputing its producer's cone
for every read, while a schedule rule that takes the whole group as one kernel keeps the
intermediate in a tile instead (the attention rules, FlashAttention and CPUAttention, keep a
block of scores; the chain rule, ContractionChain, a block of rows and its halo). With
``admitted`` (:meth:`~tvm_fusion_ext.cost.ProfitabilityCheck.takes_whole`), a pair charged with
recomputation whose merge stays inside such a group is queued with Eq. (4) less that term
and judged like any other by ``predicted_gain``: the term
would refuse it, or queue it behind merges it competes with (a depthwise conv can join the
expansion before it or the projection after it, not both). On a GPU the launch term admits the
attention chain anyway; on a CPU, where a launch costs little, this is what lets the greedy
search reach the attention kernel and the contraction chains.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass

import tvm
from tvm import relax

from ..analysis.graph import DataflowGraph, MergeCheck, MergeGain, NodeKind, OpPattern, tensor_bytes
from ..hardware.device_costs import DeviceCosts

MAX_GROUP_SIZE = 64  # the most bindings in one fused kernel
MIN_REWARD = 0.0  # a merge must save strictly more than this (seconds)


class Arity(enum.Enum):
    """Fig. 6's operator categories by fan-in."""

    ONE = "One"
    MANY = "Many"


def arity(fan_in: int) -> Arity:
    return Arity.ONE if fan_in <= 1 else Arity.MANY


@dataclass(frozen=True)
class FusionDelta:
    """What a fusion decision removes: bytes transferred, FLOPs computed, kernel launches."""

    bytes: float
    flops: float
    kernels: float

    def reward(self, costs: DeviceCosts) -> float:
        return costs.reward(self.bytes, self.flops, self.kernels)


def fig6_delta(producer: Arity, consumer: Arity, t_intermediate: float, op_producer: float,
               t_producer_inputs: float = 0.0) -> FusionDelta:
    """Fig. 6: fusing producer ``B = op1(...)`` into consumer ``op2(B, ...)`` in a training graph.

    ``t_intermediate`` is T_B, ``op_producer`` the FLOPs of op1, ``t_producer_inputs`` the bytes of
    op1's inputs (T_D + T_E for a Many producer). Every case removes one forward and one backward
    launch and B's store + load in both passes (B and gB: 4 T_B):

    * One + One: nothing recomputed (op2's derivative needs only B's own chain, fused with it);
    * One + Many: op2's gradient for its other input needs B: op1 is recomputed in the backward
      kernel (-op1); the backward no longer loads the saved B (+T_B, 5 T_B in all);
    * Many + One: op2's derivative needs B, recomputed from op1's several inputs, which op1's own
      gradient kernel loads anyway (-op1, 4 T_B);
    * Many + Many: B is recomputed in the forward kernel (each op2 output needs a window of B) and
      in the backward kernel (-2 op1); saved B's loads (2 T_B) are also gone, but recomputation
      loads op1's inputs again (-(T_D + T_E)): ``6 T_B - (T_D + T_E)``.
    """
    t = t_intermediate
    if producer is Arity.ONE and consumer is Arity.ONE:
        return FusionDelta(4 * t, 0.0, 2)
    if producer is Arity.ONE and consumer is Arity.MANY:
        return FusionDelta(5 * t, -op_producer, 2)
    if producer is Arity.MANY and consumer is Arity.ONE:
        return FusionDelta(4 * t, -op_producer, 2)
    return FusionDelta(6 * t - t_producer_inputs, -2 * op_producer, 2)


# Patterns whose kernels read each input element many times (matmul, conv, pooling windows).
_REUSING = (OpPattern.OUT_EWISE_FUSABLE, OpPattern.COMM_REDUCE)


class RewardModel:
    """Eq. (4) over merges of groups of one :class:`DataflowGraph` (see the module docstring)."""

    def __init__(self, costs: DeviceCosts):
        self.costs = costs

    def delta(self, graph: DataflowGraph, group_a, group_b) -> FusionDelta:
        """What merging ``group_a`` and ``group_b`` into one kernel removes."""
        a, b = set(group_a), set(group_b)
        union = a | b
        saved_bytes = 0.0
        saved_flops = 0.0
        for src, dst in ((a, b), (b, a)):
            for p in src:
                producer = graph.nodes[p]
                readers = [c for c in producer.outputs if c in dst]
                if not readers:
                    continue
                tensor = producer.out_bytes
                saved_bytes += tensor  # the other group no longer loads it
                outside = producer.is_block_output or any(c not in union for c in producer.outputs)
                if not outside:
                    saved_bytes += tensor  # and nobody needs it stored
                saved_flops -= self._recompute(graph, producer, readers, src, dst)
        kernels = 1 if _launches(graph, a) and _launches(graph, b) else 0
        return FusionDelta(saved_bytes, saved_flops, kernels)

    def reward(self, graph: DataflowGraph, group_a, group_b) -> float:
        return self.delta(graph, group_a, group_b).reward(self.costs)

    def profitable(self, graph: DataflowGraph, group_a, group_b) -> bool:
        """The filter other partitioners can apply: is Eq. (4) positive for this merge?"""
        return self.reward(graph, group_a, group_b) > MIN_REWARD

    @staticmethod
    def _recompute(graph: DataflowGraph, producer, readers, producer_group=(), consumer_group=()
                   ) -> float:
        """FLOPs added when ``producer``'s tensor is computed inside the consumers' kernel.

        A reusing op (matmul, conv, reduction windows) reads each element of its input ``reuse``
        times; to keep the tensor out of memory the fused kernel recomputes it for every read, i.e.
        runs ``producer`` and everything upstream of it in its group (its *cone*) ``reuse - 1``
        extra times (Fig. 6's Many consumer). The reusing op may read the tensor through element-wise
        or injective ops of its group (a concat, a transpose), which are inlined into its loads,
        so those paths are followed up to the first reusing op. Element-wise-only readers read each
        element once: nothing is recomputed.
        """
        members = set(consumer_group) | set(readers)
        reuse = 0.0
        for reader in readers:
            seen, stack = set(), [(reader, producer.index)]
            while stack:
                node, pred = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                n = graph.nodes[node]
                if n.pattern in _REUSING:
                    reuse = max(reuse, n.flops / (2.0 * _elements(graph.nodes[pred])))
                    continue
                stack.extend((c, node) for c in n.outputs if c in members)
        if reuse <= 1.0:
            return 0.0
        cone, stack = set(), [producer.index]
        upstream = set(producer_group) | {producer.index}
        while stack:
            n = stack.pop()
            if n in cone:
                continue
            cone.add(n)
            stack.extend(q for q in graph.nodes[n].inputs if q in upstream)
        return (reuse - 1.0) * sum(graph.nodes[n].flops for n in cone)


def _elements(node) -> int:
    """Elements of a node's output(s): from its shapes, else from its bytes (hand-built graphs)."""
    if node.shapes:
        total = 0
        for shape in node.shapes:
            count = 1
            for d in shape:
                count *= d
            total += count
        return max(total, 1)
    itemsize = tvm.runtime.DataType(node.dtypes[0]).bits // 8 if node.dtypes else 4
    return max(node.out_bytes // max(itemsize, 1), 1)


def _launches(graph: DataflowGraph, group) -> bool:
    """A group launches a kernel iff it holds a ``call_tir`` (tuple plumbing launches nothing)."""
    return any(graph.nodes[n].kind is NodeKind.CALL_TIR for n in group)


def _fusible(node) -> bool:
    if node.kind is NodeKind.TUPLE_GET_ITEM:
        return node.pattern is not OpPattern.OPAQUE
    return node.kind is NodeKind.CALL_TIR and not node.inplace and node.pattern is not OpPattern.OPAQUE


class GreedyRewardPartitioner:
    """Greedy fusion by best reward (section 5.1), as a partitioner for ``MaterializePartition``.

    Starts from one group per fusible binding (a tuple-get-item starts in its tuple producer's
    group), then repeatedly merges the producer/consumer pair of groups with the highest reward,
    as long as it is above :data:`MIN_REWARD`, the merged group stays convex and holds at most
    :data:`MAX_GROUP_SIZE` bindings. With ``predicted_gain``, the reward a merge is taken by is its
    predicted saving (module docstring); ``self.rejected`` logs ``(predicted saving, names)`` of
    the pairs the prediction refused. ``self.merges`` logs ``(reward, names)`` for every merge made.
    ``admitted`` names the pairs Eq. (4)'s recomputation term must not refuse (module docstring).
    """

    def __init__(self, model: RewardModel, max_group_size: int = MAX_GROUP_SIZE,
                 predicted_gain: MergeGain | None = None, admitted: MergeCheck | None = None):
        self.model = model
        self.max_group_size = max_group_size
        self.predicted_gain = predicted_gain
        self.admitted = admitted
        self.merges: list[tuple[float, list[str]]] = []
        self.rejected: list[tuple[float, list[str]]] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        group_of: dict[int, int] = {}
        members: dict[int, set[int]] = {}
        for node in graph.nodes:
            if not _fusible(node):
                continue
            if node.kind is NodeKind.TUPLE_GET_ITEM:
                producer = node.inputs[0] if node.inputs else None
                if producer is not None and producer in group_of:
                    gid = group_of[producer]
                    group_of[node.index] = gid
                    members[gid].add(node.index)
                continue
            group_of[node.index] = node.index
            members[node.index] = {node.index}

        version = {g: 0 for g in members}
        heap: list = []

        def neighbours(gid):
            out = set()
            for n in members[gid]:
                for m in graph.nodes[n].inputs + graph.nodes[n].outputs:
                    other = group_of.get(m)
                    if other is not None and other != gid:
                        out.add(other)
            return out

        def push(ga, gb):
            if len(members[ga]) + len(members[gb]) > self.max_group_size:
                return
            delta = self.model.delta(graph, members[ga], members[gb])
            r = delta.reward(self.model.costs)
            if delta.flops < 0 and self.admitted is not None and self.admitted(
                    graph, [frozenset(members[ga]), frozenset(members[gb])]):
                r = FusionDelta(delta.bytes, 0.0, delta.kernels).reward(self.model.costs)
            if r > MIN_REWARD:
                key = (min(ga, gb), max(ga, gb))
                heapq.heappush(heap, (-r, key, version[ga], version[gb], ga, gb,
                                      self.predicted_gain is None))

        for ga in list(members):
            for gb in neighbours(ga):
                if ga < gb:
                    push(ga, gb)

        while heap:
            neg_r, key, va, vb, ga, gb, predicted = heapq.heappop(heap)
            if ga not in members or gb not in members or version[ga] != va or version[gb] != vb:
                continue
            if graph.merge_creates_cycle(members[ga], members[gb]):
                continue
            if not predicted:  # back in the queue with the saving the cost model predicts
                gain = self.predicted_gain(graph, [frozenset(members[ga]), frozenset(members[gb])])
                gain = -neg_r if gain is None else gain  # no prediction: Eq. (4) as written
                if gain > MIN_REWARD:
                    heapq.heappush(heap, (-gain, key, va, vb, ga, gb, True))
                else:
                    self.rejected.append((gain, sorted(graph.nodes[n].name
                                                       for n in members[ga] | members[gb])))
                continue
            self.merges.append((-neg_r, sorted(graph.nodes[n].name for n in members[ga] | members[gb])))
            members[ga] |= members.pop(gb)
            del version[gb]
            version[ga] += 1
            for n in members[ga]:
                group_of[n] = ga
            for other in neighbours(ga):
                push(ga, other)
        return [sorted(m) for m in members.values() if len(m) > 1]


@dataclass(frozen=True)
class Recompute:
    """Decision: recompute node ``producer`` inside each of ``consumers`` instead of loading it."""

    producer: int
    consumers: tuple[int, ...]
    reward: float


def recompute_decisions(graph: DataflowGraph, groups: list[list[int]], model: RewardModel
                        ) -> list[Recompute]:
    """Forward/backward coupling (section 5.1): should a fused group's tensor that other kernels
    still need (typically saved for the backward pass) be recomputed by them instead?

    For a node ``p`` of a multi-node group ``G`` whose output leaves ``G`` (and not the block), the
    alternative to keeping it materialised is to recompute ``p`` in every outside consumer ``c``.
    Eq. (4) for that alternative, against keeping it:

    * ``dT``: each consumer's load of the tensor (T_B each) and its store (T_B), minus the loads
      of ``p``'s inputs that ``c`` does not read already;
    * ``dC``: ``-flops(p)`` per consumer, more if ``c`` reuses its inputs (see ``_recompute``);
    * ``dK``: 0 (the copy joins the consumer's kernel).

    Only ``p`` whose inputs stay materialised after fusion can be recomputed elsewhere. Returns the
    decisions with a positive reward.
    """
    group_of = {m: gi for gi, g in enumerate(groups) for m in g}
    decisions = []
    for gi, group in enumerate(groups):
        members = set(group)
        for p in group:
            node = graph.nodes[p]
            if node.kind is not NodeKind.CALL_TIR or node.is_block_output:
                continue
            outside = [c for c in node.outputs if c not in members]
            if not outside or not all(_materialised(graph, q, members) for q in node.inputs):
                continue
            loads = 0.0
            flops = 0.0
            for c in outside:
                already = set(graph.nodes[c].inputs)
                if c in group_of:
                    already |= {q for m in groups[group_of[c]] for q in graph.nodes[m].inputs}
                loads += node.out_bytes - _external_input_bytes(graph, p) - sum(
                    graph.nodes[q].out_bytes for q in node.inputs if q not in already)
                flops += node.flops + RewardModel._recompute(graph, node, [c], (), ())
            delta = FusionDelta(loads + node.out_bytes, -flops, 0)
            reward = delta.reward(model.costs)
            if reward > MIN_REWARD:
                decisions.append(Recompute(p, tuple(outside), reward))
    return decisions


def _external_input_bytes(graph: DataflowGraph, node: int) -> int:
    """Bytes of a node's tensor arguments defined outside the block (parameters, constants)."""
    if not graph.bindings:
        return 0
    inside = {b.var for b in graph.bindings}
    value = graph.bindings[node].value
    args = value.args[1].fields if isinstance(value, relax.Call) and len(value.args) > 1 \
        and isinstance(value.args[1], relax.Tuple) else []
    return sum(tensor_bytes(a.ty) for a in args if a not in inside)


def _materialised(graph: DataflowGraph, node: int, group: set[int]) -> bool:
    """Is ``node``'s output in memory after ``group`` is fused (outside it, or leaving it)?"""
    n = graph.nodes[node]
    return node not in group or n.is_block_output or any(c not in group for c in n.outputs)

"""The GraphTurbo partitioner: Algorithm 2's sub-graphs of one dataflow block, plus the plan.

Called by :class:`~tvm_fusion_ext.MaterializePartition` once per dataflow block; each SG becomes one
kernel through ``FuseTIR``. For every block it also records the plan of sections 3.3-3.4 (instances,
the chosen BFS/DFS order and its LB peak, bindings and output scopes) and, per kernel, the
:class:`~.kernel_plan.SubgraphPlan` the kernel generator realises (keyed by the kernel's sequence
of PrimFunc names, which is also the body of the grouped function ``MaterializePartition`` makes).

With ``chain`` (a kernel generator that runs instance loops, i.e. the DSA), the depth-first order
of section 3.3 is realised across sub-graphs: a straight chain of SGs that can all be split along
one dimension so that instance ``j`` of each needs only slice ``j`` of its producer
(:func:`chains`, :func:`chain_split`) becomes one kernel whose instance loop takes each slice
through the whole chain (Fig. 3(b), Fig. 7(f)), so the SG outputs inside it never leave the chip.
The chains are kept when Algorithm 3's order over their instances has the lower LB peak. A chain may
split an SG along another dimension than its BestSplit (BERT's FFN up-projection, split along its
columns alone, is split along the tokens of the down-projection that follows it); Algorithm 2 is
unchanged, only the kernels it is realised with.

With ``kernel_cost`` (the DSA's simulator, section 4: the kernel generator picks among
implementations, and section 3's instances are a means to fewer DDR round trips, not an end), a
kernel of more than one anchor op is kept only where it simulates in at most the cycles of its
parts as kernels of their own (:meth:`GraphTurboPartitioner.judge`): a chain's SGs, an SG's
layers (:func:`layers`).
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from ...analysis.graph import DataflowGraph, MergeCheck, NodeKind
from .binding import BindingResult, infer_bindings
from .grouping import Grouping, group_subgraphs
from .instances import InstanceGraph, build_instances, choose_order, order_peak
from .kernel_plan import KernelOptions, SubgraphPlan
from .ops import TurboGraph, from_dataflow_graph
from .split_info import MAX_RECOMPUTE_RATIO, Split, output_op, propagate, recompute_ratio

_LOG = logging.getLogger(__name__)

# Simulated cycles of the kernel each ``(ops, plan)`` of a batch makes (``ops``: node ids of the
# graph, ``plan``: its plan JSON or None), or None where no kernel can be made of them. A batch
# lets the kernel generator generate its kernels in parallel.
KernelCost = Callable[[DataflowGraph, list[tuple[tuple[int, ...], str | None]]], list[int | None]]


@dataclass
class BlockPlan:
    graph: TurboGraph
    grouping: Grouping
    instances: InstanceGraph
    order_kind: str
    order: list[int]
    lb_peak: int
    binding: BindingResult
    kernels: dict[tuple[str, ...], SubgraphPlan]
    chains: list[list[int]]  # SGs per kernel


class GraphTurboPartitioner:
    """``partitioner(graph) -> groups`` for ``lb_bytes`` of local buffer and ``cores`` per cluster.

    ``max_ops`` caps an SG's op count and ``single_anchor`` allows one anchor op per SG (see
    :mod:`.grouping`); ``plans`` collects one
    :class:`BlockPlan` per partitioned block; ``options`` (Fig. 15's switches) go into every
    sub-graph plan. With ``accept`` (the profitability check, CPU targets), a merge Algorithm 2's
    rules allow is made only where it accepts the SGs' union as one kernel. With ``kernel_cost``
    (DSA targets) every kernel of several anchors is checked against its parts (:meth:`judge`).
    ``gb_bytes``: the global buffer the SGs no split of which fits LB are grouped against
    (section 3.6, :mod:`.grouping`); None: such SGs take only their layers' epilogues.
    """

    def __init__(self, lb_bytes: int, cores: int, max_ops: int | None = None,
                 options: KernelOptions | None = None, single_anchor: bool = False,
                 chain: bool = False, accept: MergeCheck | None = None,
                 kernel_cost: KernelCost | None = None, gb_bytes: int | None = None):
        self.lb_bytes = lb_bytes
        self.gb_bytes = gb_bytes
        self.cores = cores
        self.max_ops = max_ops
        self.chain = chain
        self.single_anchor = single_anchor
        self.accept = accept
        self.kernel_cost = kernel_cost
        self.options = options or KernelOptions()
        self.plans: list[BlockPlan] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        symbolic = [n.name for n in graph.nodes if n.kind == NodeKind.CALL_TIR and len(n.shapes) < len(n.dtypes)]
        if symbolic:  # SplitInfo sizes tensors in bytes: symbolic shapes are left unfused
            warnings.warn(f"graphturbo: {graph.func_name} block {graph.block_index} left unfused: "
                          f"SplitInfo needs static shapes, {', '.join(symbolic[:4])} have symbolic ones",
                          stacklevel=2)
            return []
        tg = from_dataflow_graph(graph)
        accept = None if self.accept is None else (lambda parts: self.accept(graph, parts))
        grouping = group_subgraphs(tg, self.lb_bytes, self.max_ops,
                                   single_anchor=self.single_anchor, accept=accept,
                                   gb_bytes=self.gb_bytes)
        callees = [str(b.value.args[0].name_hint) if n.kind == NodeKind.CALL_TIR else ""
                   for b, n in zip(graph.bindings, graph.nodes)]
        block = plan(tg, grouping, self.cores, callees, self.options,
                     chain=self.chain and self.options.instances)
        if self.kernel_cost is not None:
            block = self.judge(graph, block, callees)
        self.plans.append(block)
        kernels = [sorted(op for sg in c for op in block.grouping.groups[sg]) for c in block.chains]
        return [k for k in kernels if len(k) > 1]

    def judge(self, graph: DataflowGraph, block: BlockPlan, callees: list[str]) -> BlockPlan:
        """``block`` with every kernel of more than one anchor op that simulates slower
        (``kernel_cost``) than its parts as separate kernels replaced by them. GraphTurbo's kernel
        generator picks the fastest implementation of a sub-graph (section 4), and the instance
        scheduling of section 3 serves fewer DDR round trips (section 3.3); a fused kernel that
        loses to its parts serves neither.

        The parts of a chain are its SGs (the chain dissolved: its SGs never chain again); the
        parts of an SG are its layers (:func:`layers`), each an SG without a split (one instance,
        as Algorithm 2 gives an SG none of whose splits fits LB). The block is re-planned with
        the parts (sections 3.3-3.4), which may change other kernels as well (Algorithm 3's order,
        Algorithm 4's bindings), and the kernels that differ between the two plans are compared
        (the others cancel out); after dissolving a chain, a kernel of several anchors counts as
        the cheaper of itself and its layers under the staging schedule (which a later step
        splits it into). One kernel is replaced at a time and the block judged again until every
        kernel holds. Then two kernels that make one with a single output (:func:`joinable`) are
        joined through GB (section 3.6: :func:`chains` with ``joined``) where the joined kernel
        simulates faster than the two; the improving joins of a round are taken together where
        that is faster still, else the best alone, and the block is judged again. Every step
        lowers the simulated cycles, so that ends. Every trial of a round is planned first and
        the costs they compare asked of ``kernel_cost`` in one batch; costs and verdicts are
        memoised per (ops, plan)."""
        chain = self.chain and self.options.instances
        tg = block.graph
        costs: dict[tuple, int | None] = {}
        kept: set[tuple] = set()

        def key_of(ops, kernels: dict) -> tuple:
            """``(ops, plan JSON of their kernel in kernels or None)``."""
            found = kernels.get(tuple(callees[m] for m in ops))
            return tuple(ops), found.to_json() if found is not None else None

        def keys_of(kernels: set[tuple], cheaper_apart: bool) -> list[tuple]:
            """The cost keys :func:`total` reads for ``kernels``."""
            keys = list(kernels)
            if cheaper_apart:
                keys += [key_of(layer, {}) for ops, _ in kernels if _anchors(tg, list(ops)) > 1
                         for layer in layers(tg, list(ops))]
            return keys

        def fetch(keys: list[tuple]) -> None:
            missing = list(dict.fromkeys(key for key in keys if key not in costs))
            if missing:
                costs.update(zip(missing, self.kernel_cost(graph, missing)))

        def apart(key: tuple) -> int | None:
            ops = list(key[0])
            found = [c for c in (costs[key], _total([costs[key_of(layer, {})] for layer in layers(tg, ops)])
                                 if _anchors(tg, ops) > 1 else None) if c is not None]
            return min(found) if found else None

        def kernels_of(block: BlockPlan) -> set[tuple]:
            result = set()
            for sgs in block.chains:
                result.add(key_of(sorted(op for sg in sgs for op in block.grouping.groups[sg]), block.kernels))
            return result

        def total(kernels: set[tuple], cheaper_apart: bool) -> int | None:
            return _total([apart(key) if cheaper_apart else costs[key] for key in kernels])

        def replan(grouping: Grouping, dissolved: set, joins: set) -> BlockPlan:
            """``plan`` with the SGs ``dissolved`` unchained and the SG pairs ``joins`` joined
            (both by their ops: dissolving an SG renumbers the SGs)."""
            index = {frozenset(g): sg for sg, g in enumerate(grouping.groups)}
            return plan(tg, grouping, self.cores, callees, self.options, chain=chain,
                        unchained={index[g] for g in dissolved if g in index},
                        joined={(index[a], index[b]) for a, b in joins if a in index and b in index})

        def cheaper(trial: BlockPlan, current: set[tuple]) -> int | None:
            """How many cycles ``trial``'s kernels save over ``current`` (costs fetched)."""
            after = kernels_of(trial)
            before_cycles, after_cycles = total(current - after, False), total(after - current, False)
            return None if before_cycles is None or after_cycles is None else before_cycles - after_cycles

        def join_step(block: BlockPlan) -> tuple[BlockPlan, set] | None:
            """The block with the improving joins of one round, and the pairs joined; None when
            no join improves."""
            current = kernels_of(block)
            groups = block.grouping.groups
            trials = []
            for a, b in joinable(tg, block.grouping, block.chains):
                pair = (frozenset(groups[a]), frozenset(groups[b]))
                if pair in refused or {*pair} & unchained:
                    continue
                trial = replan(block.grouping, unchained, joined | {pair})
                if not any(a in sgs and b in sgs for sgs in trial.chains):
                    refused.add(pair)  # no split of the two lines up through GB
                    continue
                trials.append((pair, trial))
            fetch([key for _, trial in trials for key in kernels_of(trial) ^ current])
            gains = []
            for pair, trial in trials:
                gain = cheaper(trial, current)
                _LOG.debug("graphturbo judge: joining %d and %d ops through GB saves %s cycles",
                           len(pair[0]), len(pair[1]), gain)
                if gain is None or gain <= 0:
                    refused.add(pair)
                else:
                    gains.append((gain, pair, trial))
            if not gains:
                return None
            gains.sort(key=lambda item: -item[0])
            if len(gains) > 1:
                pairs = {pair for _, pair, _ in gains}
                together = replan(block.grouping, unchained, joined | pairs)
                fetch(list(kernels_of(together) ^ current))
                gain = cheaper(together, current)
                if gain is not None and gain > gains[0][0]:
                    return together, pairs
            return gains[0][2], {gains[0][1]}

        unchained: set[frozenset[int]] = set()
        joined: set[tuple[frozenset[int], frozenset[int]]] = set()
        refused: set[tuple[frozenset[int], frozenset[int]]] = set()
        while True:
            current = kernels_of(block)
            trials = []
            for sgs in block.chains:
                ops = sorted(op for sg in sgs for op in block.grouping.groups[sg])
                verdict = key_of(ops, block.kernels)
                if _anchors(tg, ops) < 2 or verdict in kept:
                    continue
                groups = block.grouping.groups
                if len(sgs) > 1:
                    dissolved = unchained | {frozenset(groups[sg]) for sg in sgs}
                    grouping = block.grouping
                else:
                    dissolved = unchained
                    gb_best = block.grouping.gb_best or [None] * len(groups)
                    items = [(g, b, gb) for sg, (g, b, gb) in enumerate(zip(groups, block.grouping.best, gb_best))
                             if sg != sgs[0]] + [(layer, None, None) for layer in layers(tg, ops)]
                    items.sort(key=lambda item: min(item[0]))
                    grouping = Grouping([g for g, _, _ in items], [b for _, b, _ in items],
                                        block.grouping.merges, [gb for _, _, gb in items])
                trial = replan(grouping, dissolved, joined)
                # Re-planning may change other kernels too (Algorithm 3's order, Algorithm 4's
                # bindings): the kernels that differ are compared, the rest cancel out.
                after = kernels_of(trial)
                trials.append((verdict, dissolved, trial, current - after, after - current, len(sgs) > 1))
            fetch([key for _, _, _, gone, new, cheaper_apart in trials
                   for key in keys_of(gone, False) + keys_of(new, cheaper_apart)])
            for verdict, dissolved, trial, gone, new, cheaper_apart in trials:
                before_cycles = total(gone, cheaper_apart=False)
                after_cycles = total(new, cheaper_apart=cheaper_apart)
                _LOG.debug("graphturbo judge: kernel of %d ops, %d anchors: %s cycles whole, %s apart",
                           len(verdict[0]), _anchors(tg, list(verdict[0])), before_cycles, after_cycles)
                if before_cycles is None or after_cycles is None or after_cycles >= before_cycles:
                    kept.add(verdict)
                    continue
                unchained = dissolved
                block = trial
                break
            else:
                step = join_step(block) if chain and block.grouping.gb_best else None
                if step is None:
                    return block
                block, pairs = step
                joined |= pairs
                # A joined kernel beats its two kernels, each of which beat its parts: kept.
                groups = block.grouping.groups
                kept.update(key_of(sorted(op for sg in sgs for op in groups[sg]), block.kernels)
                            for sgs in block.chains if any(
                                (frozenset(groups[a]), frozenset(groups[b])) in joined
                                for a, b in itertools.pairwise(sgs)))


def plan(tg: TurboGraph, grouping: Grouping, cores: int, callees: list[str] | None = None,
         options: KernelOptions | None = None, chain: bool = False,
         unchained: set[int] | frozenset[int] = frozenset(),
         joined: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()) -> BlockPlan:
    """Sections 3.3-3.4 over a grouping: instances, the better order, bindings and scopes; the
    kernels (SGs, or with ``chain`` the :func:`chains`, leaving the SGs ``unchained`` out and
    joining the SG pairs ``joined`` through GB, when the depth-first order wins on the instances
    of the chains' splits; else only the chains sized for GB and the runs of ``joined`` SGs);
    with ``callees`` (each op's PrimFunc name) also the plan of every fused kernel (the split of
    its last SG, the binding and scope of its first instance, and the scope of the first instance
    of every other SG of a chain; a kernel of one op is keyed by its PrimFunc's name alone)."""
    kernel_sgs = [[i] for i in range(len(grouping.groups))]
    splits = list(grouping.best)
    ig = build_instances(tg, grouping)
    kind, order = choose_order(ig)
    if chain:
        chained = chains(tg, grouping, unchained, joined)
        chained_splits = chain_splits(tg, grouping, chained, joined)
        chained_ig = build_instances(tg, grouping, splits=chained_splits)
        chained_kind, chained_order = choose_order(chained_ig)
        if chained_kind == "dfs":
            kernel_sgs, splits = chained, chained_splits
            ig, kind, order = chained_ig, chained_kind, chained_order
        else:  # only the chains sized for GB and the joined runs: no LB instances to order
            kept = [c for chain in chained for c in
                    ([chain] if len(chain) > 1 and _in_gb(grouping, chain) else _joined_runs(chain, joined))]
            kernel_sgs = sorted(kept, key=lambda c: min(grouping.groups[c[0]]))
    binding = infer_bindings(order, {i: inst.shape for i, inst in enumerate(ig.instances)},
                             {i: inst.producers for i, inst in enumerate(ig.instances)}, cores)
    kernels = {}
    if callees is not None:
        first = {}
        for i, inst in enumerate(ig.instances):
            first.setdefault(inst.sg, i)
        for sgs in kernel_sgs:
            ops = sorted(op for sg in sgs for op in grouping.groups[sg])
            if not tg.fusible_together(ops):
                continue
            split = splits[sgs[-1]]
            inst = first[sgs[-1]]
            outs = [output_op(tg, grouping.groups[sg]) for sg in sgs[:-1]]
            inner = tuple((ops.index(out), tuple(tg.ops[out].shape), binding.scope[first[sg]])
                          for sg, out in zip(sgs[:-1], outs))
            kernels.setdefault(tuple(callees[m] for m in ops), SubgraphPlan(
                dim=split.dim if split is not None else 0,
                instances=split.factor if split is not None else 1,
                binding=tuple(binding.bind[inst]), output_shape=tuple(tg.ops[max(ops)].shape),
                scope=binding.scope[inst], options=options or KernelOptions(),
                tensor_scopes=inner))
    return BlockPlan(tg, grouping, ig, kind, order, order_peak(ig, order), binding, kernels,
                     kernel_sgs)


def chains(tg: TurboGraph, grouping: Grouping, unchained: set[int] | frozenset[int] = frozenset(),
           joined: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()) -> list[list[int]]:
    """Straight chains of SGs (in topological order) whose instances line up: SG ``b`` joins the
    chain ending with ``a`` when ``a`` is its only producer SG, ``b`` the only consumer SG of
    ``a``, and the chain with ``b`` still has a :func:`chain_split` - then
    instance ``j`` of the chain needs only slice ``j`` of every SG in it, and the depth-first
    order of Algorithm 3 runs them back to back. A pair ``(a, b)`` in ``joined`` is chained
    through GB (section 3.6): by every SG's split against GB; a chain with such a pair grows by
    joined pairs only, and joins kernels :func:`_join_kernels` describes. An SG in ``unchained``
    is a chain of its own."""
    producers, consumers = _sg_links(tg, grouping)
    result: list[list[int]] = []
    tail: dict[int, int] = {}  # last SG of a chain -> its index in result
    for sg in sorted(range(len(grouping.groups)), key=lambda g: min(grouping.groups[g])):
        prev = next(iter(producers[sg])) if len(producers[sg]) == 1 else None
        if (prev is not None and prev in tail and consumers[prev] == {sg}
                and sg not in unchained and prev not in unchained):
            longer = [*result[tail[prev]], sg]
            through = [pair in joined for pair in itertools.pairwise(longer)]
            if (through[-1] or not any(through)) and \
                    chain_split(tg, grouping, longer, any(through)) is not None:
                chain = tail.pop(prev)
                result[chain].append(sg)
                tail[sg] = chain
                continue
        tail[sg] = len(result)
        result.append([sg])
    return _join_kernels(tg, grouping, result, joined) if joined else result


def _join_kernels(tg: TurboGraph, grouping: Grouping, kernel_sgs: list[list[int]],
                  joined: set[tuple[int, int]] | frozenset[tuple[int, int]]) -> list[list[int]]:
    """``kernel_sgs`` with each pair ``(a, b)`` of ``joined`` that ends one kernel and starts
    another joined through GB where :func:`chains` cannot (``b`` reads another SG of the kernel
    before it, or that kernel's last SG feeds another of the kernel after it: a residual, as in
    ResNet's bottleneck blocks, whose output feeds the next block's first conv and its add):
    where the two make one kernel with a single output (:func:`single_exit`), split through GB
    (:func:`chain_split`), the SGs after the pair joined too (a chain through GB grows by joined
    pairs only)."""
    readers = _readers(tg, grouping)
    kernels = [list(k) for k in kernel_sgs]
    pending = sorted(joined)
    while True:  # a join may need another made first (the SGs of one block before the next block)
        for a, b in pending:
            first = next((k for k in kernels if k[-1] == a), None)
            second = next((k for k in kernels if k[0] == b), None)
            if first is None or second is None or first is second:
                continue
            merged = first + second
            if (all(pair in joined for pair in itertools.pairwise(second))
                    and single_exit(merged, readers)
                    and chain_split(tg, grouping, merged, True) is not None):
                first.extend(second)
                kernels.remove(second)
                pending.remove((a, b))
                break
        else:
            return kernels


def single_exit(sgs: list[int], readers: list[set[int]]) -> bool:
    """Whether the SGs ``sgs`` (in this order) run as one kernel with one output: every SG but
    the last is read only by SGs after it in ``sgs`` (``readers``: :func:`_readers`)."""
    position = {sg: i for i, sg in enumerate(sgs)}
    return all(r in position and position[r] > i for i, sg in enumerate(sgs[:-1]) for r in readers[sg])


def _readers(tg: TurboGraph, grouping: Grouping) -> list[set[int]]:
    """Each SG's consumer SGs, and -1 for an SG holding an output of the block (read after it)."""
    _, consumers = _sg_links(tg, grouping)
    return [found | ({-1} if any(tg.ops[op].is_output for op in group) else set())
            for found, group in zip(consumers, grouping.groups)]


def joinable(tg: TurboGraph, grouping: Grouping, kernel_sgs: list[list[int]]) -> list[tuple[int, int]]:
    """The SG pairs ``(a, b)`` with ``a`` the last SG of one kernel of ``kernel_sgs`` and ``b``
    the first of another that reads it, where the two kernels make one with a single output
    (:func:`single_exit`): what the judge tries to join through GB (section 3.6)."""
    readers = _readers(tg, grouping)
    heads = {sgs[0]: sgs for sgs in kernel_sgs}
    return [(sgs[-1], b) for sgs in kernel_sgs for b in sorted(readers[sgs[-1]])
            if b in heads and heads[b] is not sgs and single_exit(sgs + heads[b], readers)]


def _sg_links(tg: TurboGraph, grouping: Grouping) -> tuple[list[set[int]], list[set[int]]]:
    """Each SG's producer SGs and consumer SGs."""
    owner = {op: sg for sg, group in enumerate(grouping.groups) for op in group}
    producers: list[set[int]] = [set() for _ in grouping.groups]
    consumers: list[set[int]] = [set() for _ in grouping.groups]
    for sg, group in enumerate(grouping.groups):
        for op in group:
            for p in tg.ops[op].inputs:
                if owner[p] != sg:
                    producers[sg].add(owner[p])
                    consumers[owner[p]].add(sg)
    return producers, consumers


def chain_split(tg: TurboGraph, grouping: Grouping, sgs: list[int],
                through_gb: bool = False) -> dict[int, Split] | None:
    """The split of every SG of a chain run as one instance loop (Fig. 3(b)): the last SG's
    BestSplit dimension, as many instances as the chain's largest splitting factor (so every SG's
    instance fits LB), reaching each SG's output along one of its dimensions with no halo
    (:func:`propagate`) - which need not be the SG's own BestSplit dimension - and recomputing at
    most section 3.1's :data:`MAX_RECOMPUTE_RATIO` of the chain's FLOPs. None if there is none.
    A chain of SGs some of which have no LB split (:func:`_in_gb`) is split by their BestSplits
    against GB (section 3.6, ``grouping.gb_best``), the others' by theirs against LB: its
    instances fit GB, and where the last SG's dimension has no such split, the outermost one
    (the images of a batch: no halo, nothing recomputed) is tried too, with at most as many
    instances as it has indices. With ``through_gb`` (a chain :func:`chains` joins through GB)
    every SG is split by its BestSplit against GB, those with none by theirs against LB."""
    if through_gb and not grouping.gb_best:
        return None
    in_gb = through_gb or _in_gb(grouping, sgs)
    best = [(grouping.gb_best[sg] or grouping.best[sg])
            if through_gb or (in_gb and grouping.best[sg] is None) else grouping.best[sg]
            for sg in sgs]
    members = sorted(op for sg in sgs for op in grouping.groups[sg])
    if any(b is None for b in best) or not tg.fusible_together(members):
        return None
    count = max(b.factor for b in best)
    dims = [best[-1].dim] + ([0] if in_gb and best[-1].dim != 0 else [])
    for dim in dims:
        outermost = int(tg.ops[output_op(tg, grouping.groups[sgs[-1]])].shape[dim])
        found = _chain_split_along(tg, grouping, sgs, best, members, dim,
                                   min(count, outermost) if dim != best[-1].dim else count)
        if found is not None:
            return found
    return None


def _chain_split_along(tg: TurboGraph, grouping: Grouping, sgs: list[int], best: list[Split],
                       members: list[int], dim: int, count: int) -> dict[int, Split] | None:
    """:func:`chain_split` along dimension ``dim`` of the last SG's output in ``count``
    instances, or None."""
    if len(sgs) > 1 and recompute_ratio(tg, members, dim, count) > MAX_RECOMPUTE_RATIO:
        return None
    state = propagate(tg, members, dim, count)
    result = {}
    for sg, b in zip(sgs, best):
        out = output_op(tg, grouping.groups[sg])
        need, out_dim = state[out]
        if out_dim is None or need > 1.0 / count + 1e-9 or tg.ops[out].shape[out_dim] < count:
            return None
        result[sg] = Split(b.split, b.n, count, out_dim)
    return result


def chain_splits(tg: TurboGraph, grouping: Grouping, kernel_sgs: list[list[int]],
                 joined: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()
                 ) -> list[Split | None]:
    """Every SG's split when the SGs of each of ``kernel_sgs`` run as one kernel: the
    :func:`chain_split` of its chain (its BestSplit when alone or in a chain through GB, whose
    instance count the kernel generator picks)."""
    splits = list(grouping.best)
    for sgs in kernel_sgs:
        if len(sgs) > 1 and not _through_gb(grouping, sgs, joined):
            for sg, split in chain_split(tg, grouping, sgs).items():
                splits[sg] = split
    return splits


def layers(tg: TurboGraph, ops: list[int]) -> list[list[int]]:
    """The layers of a kernel's ops (section 1.1: an anchor, e.g. a conv, with the element-wise
    ops on its result such as batchnorm and ReLU), in topological order: an anchor op starts a
    layer, as does an op with no producer among ``ops``; any other op joins the latest layer of
    its producers (so the layers' dependences go forwards only). What a sub-graph is made of when
    it runs as kernels of one anchor each (:meth:`GraphTurboPartitioner.judge`)."""
    layer_of: dict[int, int] = {}
    result: list[list[int]] = []
    for op in sorted(ops):
        inside = [layer_of[p] for p in tg.ops[op].inputs if p in layer_of]
        if tg.ops[op].anchor or not inside:
            layer_of[op] = len(result)
            result.append([op])
        else:
            layer_of[op] = max(inside)
            result[layer_of[op]].append(op)
    return result


def _in_gb(grouping: Grouping, sgs: list[int]) -> bool:
    """Whether some of the SGs ``sgs`` have no split fitting LB, each of those with a BestSplit
    against GB (section 3.6): their chain's instances are sized for GB (an SG that has an LB split
    runs at the chain's coarser instances, which fit GB too), and the kernel generator picks the
    instance count (``target_dsa/instance_schedule.py``)."""
    if not grouping.gb_best:
        return False
    gb = [sg for sg in sgs if grouping.best[sg] is None]
    return bool(gb) and all(grouping.gb_best[sg] is not None for sg in gb)


def _through_gb(grouping: Grouping, sgs: list[int],
                joined: set[tuple[int, int]] | frozenset[tuple[int, int]]) -> bool:
    """Whether the chain ``sgs`` runs through GB: :func:`_in_gb`, or two of its SGs ``joined``."""
    return _in_gb(grouping, sgs) or any(pair in joined for pair in itertools.pairwise(sgs))


def _joined_runs(chain: list[int], joined: set[tuple[int, int]] | frozenset[tuple[int, int]]
                 ) -> list[list[int]]:
    """``chain`` cut between every two SGs not ``joined``: the kernels it makes when its LB links
    are not taken (Algorithm 3 prefers the breadth-first order), so that joining two SGs through
    GB joins those two and no LB link before them."""
    runs = [[chain[0]]]
    for a, b in itertools.pairwise(chain):
        if (a, b) in joined:
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs


def _anchors(tg: TurboGraph, ops: list[int]) -> int:
    return sum(tg.ops[op].anchor for op in ops)


def _total(costs: list[int | None]) -> int | None:
    return None if None in costs else sum(costs)

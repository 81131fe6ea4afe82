"""The profitability check every fusion strategy consults: is a group's kernel predicted faster
than its parts?

Fusion papers decide from the graph alone (APOLLO's rules and upward feedback, sections 2 and 5;
NeoFlow's Eq. (4); GraphTurbo's Algorithm 2 rules; backward dominator fusion), so they cannot see
that the kernel a group becomes may schedule worse than its parts: two contractions in one kernel
leave one of them without a register tile, a whole recurrent cell in one kernel keeps every
intermediate in memory and loses the per-op tiling. :class:`ProfitabilityCheck` makes the kernel
of a candidate group as the pipeline will (:func:`fused_kernel`: the group's bindings as one
``Primitive`` function, ``FuseTIR``, ``StmtSimplify``), predicts its time, and compares it with
the sum of the predicted times of the groups it would replace.

On a CPU target the kernels are predicted under the default schedule with
:class:`~.model.KernelCostModel`, calibrated on the host; on a ``cuda`` target under the CUDA
backend's rule chain with :class:`~.gpu_model.GPUKernelModel` (which rule takes the kernel, and
what that rule's schedule is worth on the GPU). On both, merges around the groups the target's
attention rule takes whole (:mod:`.attention_groups`) are judged as :meth:`ProfitabilityCheck.verdict`
says; :meth:`ProfitabilityCheck.takes_whole` also names the contraction chains the CPU schedule
takes as one loop nest (:mod:`.chain_groups`). On a DSA target the kernels are those of the staging
schedule, simulated (:class:`~.dsa_model.DSAKernelModel`); GraphTurbo's kernel generator has its
own judge there, the same simulator (``partitioners/graphturbo/partitioner.py``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm import tirx

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..hardware.device_costs import cache_dir, host_key
from .attention_groups import attention_groups
from .calibration import load_or_calibrate
from .chain_groups import is_chain_group
from .dsa_model import DSAKernelModel
from .gpu_model import GPUKernelModel
from .group_kernel import fused_kernel, group_signature
from .model import KernelCostModel, Rates, store_name

# A fused kernel is refused only when predicted more than this fraction slower than its parts:
# within it the prediction cannot tell them apart, and the paper's decision stands.
SLOWER_MARGIN = 0.05

# One model per prediction store (host, target, rates) and per GPU or DSA target in this process:
# predictions survive from one compile to the next.
_MODELS: dict[Path, KernelCostModel] = {}
_DEVICE_MODELS: dict[str, GPUKernelModel | DSAKernelModel] = {}


@dataclass(frozen=True)
class Verdict:
    """Predicted seconds of a group's kernel (``fused_s``, infinite when it cannot be made) and
    of the kernels it replaces (``parts_s``); both ``None`` when nothing is predicted: for the
    reason ``unpredicted`` (see :meth:`ProfitabilityCheck.verdict`), and then the strategy's own
    decision stands, or because a rule refuses the merge whatever its parts cost (``refused``
    says which)."""

    fused_s: float | None
    parts_s: float | None
    unpredicted: str = ""
    refused: str = ""

    @property
    def profitable(self) -> bool:
        """Not refused, and not predicted slower than its parts (beyond :data:`SLOWER_MARGIN`);
        true when abstaining."""
        if self.refused:
            return False
        return self.fused_s is None or self.fused_s <= self.parts_s * (1.0 + SLOWER_MARGIN)

    @property
    def gain_s(self) -> float | None:
        """Seconds the fusion is predicted to save (negative: to cost; minus infinity when
        refused); ``None`` when abstaining."""
        if self.refused:
            return -math.inf
        return None if self.fused_s is None else self.parts_s - self.fused_s

    def describe(self) -> str:
        if self.refused:
            return f"refused: {self.refused}"
        if self.fused_s is None:
            return f"no prediction ({self.unpredicted})"
        fused = "no single kernel" if math.isinf(self.fused_s) else f"{self.fused_s * 1e6:.1f} us"
        return f"predicted {fused} fused against {self.parts_s * 1e6:.1f} us for its parts"


class ProfitabilityCheck:
    """Predicted times of groups of a :class:`DataflowGraph` and the verdict on merging them.

    Kernels are predicted by ``model`` (anything with :class:`~.model.KernelCostModel`'s
    ``seconds`` and ``remembered``, e.g. :class:`~.gpu_model.GPUKernelModel`); by default by the
    CPU model with ``rates``, which default to this host's calibration
    (:func:`.calibration.load_or_calibrate`). A
    group's prediction is remembered (in this process and in the cache directory, see
    :class:`~.model.KernelCostModel`) under its structure (:func:`group_signature`), so a group
    met again - in a repeated layer, a second partitioning pass, a second compile - is neither
    fused nor scheduled again.
    """

    def __init__(self, target: tvm.target.Target, rates: Rates | None = None, model=None):
        self.target = target
        if model is None:
            rates = rates or load_or_calibrate()
            store = cache_dir() / store_name(target, rates, host_key())
            if store not in _MODELS:
                _MODELS[store] = KernelCostModel(target, rates, store)
            model = _MODELS[store]
        self.model = model
        self.on_gpu = "cuda" in list(target.keys)
        self.on_dsa = "dsa" in list(target.keys)
        self._hashes: dict = {}  # PrimFunc -> structural hash, for this check's graphs
        self._static_funcs: dict = {}  # PrimFunc -> whether every buffer has a static shape
        self._groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> {group: s}

    def group_seconds(self, graph: DataflowGraph, group: Iterable[int]) -> float:
        """Predicted seconds of the kernel ``group`` becomes (0 without a ``call_tir``: tuple
        plumbing launches nothing; 0 for a reshape left alone whose result stays in the block: it
        becomes a view, :attr:`~..analysis.graph.OpNode.becomes_view`; infinite when the pipeline
        cannot make it one kernel)."""
        members = frozenset(group)
        known = self._groups.setdefault(graph, {})
        if members not in known:
            known[members] = self._predict(graph, sorted(members))
        return known[members]

    def _predict(self, graph: DataflowGraph, members: list[int]) -> float:
        if not any(graph.nodes[m].kind is NodeKind.CALL_TIR for m in members):
            return 0.0
        if len(members) == 1 and graph.nodes[members[0]].becomes_view:
            return 0.0

        def predict():
            kernel = fused_kernel(graph, members, layout_free=not self.on_dsa)  # the DSA packs no weights
            return math.inf if kernel is None else self.model.seconds(kernel)

        signature = group_signature(graph, members, self._hash)
        if signature is None:
            return predict()
        return self.model.remembered(signature, predict)

    def verdict(self, graph: DataflowGraph, parts: Iterable[Iterable[int]], final: bool = False) -> Verdict:
        """Merging ``parts`` (disjoint groups) into one kernel, against keeping them apart.

        Around attention groups (:func:`~.attention_groups.attention_groups`, the groups the
        target's attention rule - FlashAttention, CPUAttention - schedules as one kernel): a merge
        that stays strictly inside one gets no prediction: the steps towards the kernel the rule
        takes whole are kernels of the other rules (``Fallback`` on a GPU, one plain loop nest
        per op on a CPU), and the strategy's decision stands for them. With ``final`` the merge
        is a kernel as it will be built, not a step (APOLLO checks its finished groups), and one
        strictly inside an attention group is judged as any group. A merge that takes an op of
        one's core together with an op outside it is refused without predicting anything: its
        kernel is no attention, and once formed it keeps the attention from the rule for good.
        Anything else, the whole group
        included, is judged as any group is.

        Nothing is predicted for a group with symbolic shapes (the model cannot count its loop
        trips) nor for one of element-wise, broadcast and injective ops only: its kernel is loop
        nests the default schedule vectorises and parallelises like each op's own, reading each
        intermediate from registers or cache instead of memory, with fewer kernel calls - it is
        never the fusion the schedule degrades (no contraction or reduction to lose a tile; on a
        GPU, ``Fallback`` gives element-wise kernels one thread per element, as each op's own; on a
        DSA the staging schedule inlines them into one block); nor, on a CPU, for one contraction
        (``OUT_EWISE_FUSABLE``: matmul, conv) with element-wise and broadcast ops downstream of
        it, none with more output elements than it: what ``FuseOps`` forms, an epilogue that
        reads each output element where the contraction writes it, which the default schedule
        applies in the micro-kernel's write-back. On a DSA such a group is judged too: the
        staging schedule takes kernels of one output block only (``target_dsa/schedule.py``), so
        an epilogue group whose contraction's result is also read outside it runs unstaged, and
        a prediction is one simulated kernel. An injective op (a slice, a
        transpose) moves elements across tiles and is judged as any group, and so is every group
        on a GPU, where dlight's GEMM rules take only some epilogues. Most of a greedy search's
        candidate groups are of this kind, and predicting one means scheduling its kernel. A
        merge that makes a contraction chain (:func:`.chain_groups.is_chain_group`) is judged
        without the epilogue of the chain's last contraction (:func:`_chain_epilogue`), and not at
        all when it only adds that epilogue to a chain."""
        parts = [frozenset(p) for p in parts]
        union = frozenset().union(*parts)
        for group in attention_groups(graph, self.target, self.model.remembered):
            if union < group.members and not final:
                return Verdict(None, None, "part of an attention kernel one rule takes whole")
            if union & group.core and not union <= group.members:
                return Verdict(None, None, refused="it takes ops of an attention kernel one rule "
                                                  "takes whole together with ops outside it")
        if not self._static(graph, union):
            return Verdict(None, None, "symbolic shapes")
        if all(graph.nodes[m].pattern <= OpPattern.INJECTIVE for m in union):
            return Verdict(None, None, "element-wise and injective ops only")
        if not self.on_gpu and not self.on_dsa and _anchor_with_epilogue(graph, union):
            return Verdict(None, None, "a contraction with its element-wise epilogue")
        if not self.on_gpu and is_chain_group(graph, union, self.target):
            # The epilogue costs the same in the chain's tile as in its contraction's own kernel,
            # so the steps by which it grows share one prediction.
            epilogue = _chain_epilogue(graph, union)
            parts = [part - epilogue for part in parts if part - epilogue]
            if len(parts) < 2:
                return Verdict(None, None, "a contraction chain with its element-wise epilogue")
            union -= epilogue
        return Verdict(self.group_seconds(graph, union),
                       sum(self.group_seconds(graph, p) for p in parts))

    def epilogue_verdict(self, graph: DataflowGraph, group: Iterable[int]) -> Verdict | None:
        """A group that holds the element-wise epilogue of a contraction outside it, against
        that contraction with its epilogue as one kernel and the rest of the group as another
        (``fused_s``: the group and the contraction alone; ``parts_s``: the alternative).

        The epilogue is what the group reaches from the contraction's output through element-wise
        and broadcast ops that read nothing else of the group (:func:`_anchor_with_epilogue`), the
        contraction's output read by the group alone: what ``FuseOps`` forms and the default
        schedule applies in the micro-kernel's write-back. A group built around another anchor
        (APOLLO's rules 4 and 5 take element-wise ops into a reduction before rule 6 gives them to
        the conv: an MBConv block's bias and SiLU go with the squeeze-excite mean) leaves the
        contraction to write its raw output and reads it back. ``None`` when the group holds no such epilogue, or nothing is left beside it."""
        members = frozenset(group)
        for contraction in sorted({p for m in members for p in graph.nodes[m].inputs} - members):
            node = graph.nodes[contraction]
            if node.pattern is not OpPattern.OUT_EWISE_FUSABLE or not node.outputs \
                    or not all(c in members for c in node.outputs):
                continue
            epilogue, stack = set(), [contraction]
            while stack:
                for consumer in graph.nodes[stack.pop()].outputs:
                    if consumer in members and consumer not in epilogue \
                            and graph.nodes[consumer].pattern <= OpPattern.BROADCAST \
                            and set(graph.nodes[consumer].inputs) & members <= epilogue | {contraction}:
                        epilogue.add(consumer)
                        stack.append(consumer)
            rest = members - epilogue
            with_epilogue = frozenset(epilogue | {contraction})
            if not epilogue or not rest or not _anchor_with_epilogue(graph, with_epilogue) \
                    or not self._static(graph, members | with_epilogue):
                continue
            return Verdict(self.group_seconds(graph, members) + self.group_seconds(graph, [contraction]),
                           self.group_seconds(graph, with_epilogue) + self.group_seconds(graph, rest))
        return None

    def regrouping_verdict(self, graph: DataflowGraph, current: Iterable[Iterable[int]],
                           alternative: Iterable[Iterable[int]]) -> Verdict:
        """The groups ``alternative`` against ``current``, the same ops grouped otherwise
        (``fused_s``: the predicted seconds of ``alternative``'s kernels; ``parts_s``: of
        ``current``'s); nothing predicted for symbolic shapes."""
        current, alternative = [frozenset(g) for g in current], [frozenset(g) for g in alternative]
        if not self._static(graph, frozenset().union(*current)):
            return Verdict(None, None, "symbolic shapes")
        return Verdict(sum(self.group_seconds(graph, g) for g in alternative),
                       sum(self.group_seconds(graph, g) for g in current))

    def takes_whole(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> bool:
        """Whether merging ``parts`` stays inside a group the target's attention rule takes whole
        (the group itself included), or makes a chain of two contractions the chain rule takes
        as one loop nest (:mod:`.chain_groups`)."""
        union = frozenset().union(*map(frozenset, parts))
        return any(union <= group.members
                   for group in attention_groups(graph, self.target, self.model.remembered)) \
            or is_chain_group(graph, union, self.target)

    def accepts(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> bool:
        return self.verdict(graph, parts).profitable

    def _static(self, graph: DataflowGraph, members) -> bool:
        """Every buffer of the members' PrimFuncs has a static shape."""
        funcs = [graph.nodes[m].prim_func for m in members if graph.nodes[m].prim_func is not None]
        for func in funcs:
            if func not in self._static_funcs:
                self._static_funcs[func] = all(isinstance(dim, tirx.IntImm)
                                               for param in func.params for dim in param.shape)
        return all(self._static_funcs[func] for func in funcs)

    def _hash(self, func: tirx.PrimFunc) -> int:
        if func not in self._hashes:
            self._hashes[func] = tvm_ffi.structural_hash(func)
        return self._hashes[func]


def _chain_epilogue(graph: DataflowGraph, members: frozenset) -> frozenset:
    """The element-wise and broadcast ops of the chain group ``members``
    (:func:`.chain_groups.is_chain_group`) downstream of its last contraction, where they are its
    epilogue (:func:`_anchor_with_epilogue`): what the chain rule applies in the anchor's tile as
    the default schedule does for one contraction. Empty otherwise."""
    first, second = [m for m in members if graph.nodes[m].pattern is OpPattern.OUT_EWISE_FUSABLE]
    last = second if second in graph.reachable_from([first]) else first
    tail = frozenset(graph.reachable_from([last]) & members)
    return tail - {last} if _anchor_with_epilogue(graph, tail) else frozenset()


def _anchor_with_epilogue(graph: DataflowGraph, members: frozenset) -> bool:
    """``members`` are one ``OUT_EWISE_FUSABLE`` call and element-wise or broadcast ops that it
    reaches inside the group, none with more output elements than it (a broadcast that scales a
    larger tensor by the contraction's output is no epilogue of it)."""
    anchors = [m for m in members if graph.nodes[m].pattern > OpPattern.BROADCAST]
    if len(anchors) != 1 or graph.nodes[anchors[0]].pattern is not OpPattern.OUT_EWISE_FUSABLE:
        return False
    anchor = anchors[0]
    size = _elements(graph.nodes[anchor])
    downstream, stack = {anchor}, [anchor]
    while stack:
        for consumer in graph.nodes[stack.pop()].outputs:
            if consumer in members and consumer not in downstream:
                downstream.add(consumer)
                stack.append(consumer)
    return downstream == members and all(_elements(graph.nodes[m]) <= size for m in members)


def _elements(node) -> int:
    """Output elements of a node (all its outputs); 0 when its shapes are unknown."""
    return sum(math.prod(shape) for shape in node.shapes)


def profitability_for(target: tvm.target.Target | None, enabled: bool = True,
                      rates: Rates | None = None) -> ProfitabilityCheck | None:
    """The check for ``target``: on a CPU with the host's ``rates``, on a ``cuda`` target with
    :class:`~.gpu_model.GPUKernelModel`, on a DSA with :class:`~.dsa_model.DSAKernelModel`;
    ``None`` when ``enabled`` is off or for other targets."""
    target = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    if not enabled:
        return None
    keys = list(target.keys)
    device_model = GPUKernelModel if "cuda" in keys else DSAKernelModel if "dsa" in keys else None
    if device_model is not None:
        key = str(target)
        if key not in _DEVICE_MODELS:
            _DEVICE_MODELS[key] = device_model(target)
        return ProfitabilityCheck(target, model=_DEVICE_MODELS[key])
    if target.kind.name != "llvm":
        return None
    return ProfitabilityCheck(target, rates)

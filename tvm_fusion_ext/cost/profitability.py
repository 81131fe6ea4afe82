"""The profitability check every fusion strategy consults: is a group's kernel predicted faster
than its parts?

Fusion papers decide from the graph alone (APOLLO's rules and upward feedback, sections 2 and 5;
NeoFlow's Eq. (4); GraphTurbo's Algorithm 2 rules; backward dominator fusion), so they cannot see
that the kernel a group becomes may schedule worse than its parts: two contractions in one kernel
leave one of them without a register tile, a whole recurrent cell in one kernel keeps every
intermediate in memory and loses the per-op tiling. :class:`ProfitabilityCheck` makes the kernel
of a candidate group exactly as the pipeline will (:func:`group_module`, the shared
``MaterializePartition``, ``FuseTIR``, ``StmtSimplify``), predicts its time under the default
schedule with :class:`~.model.KernelCostModel`, and compares it with the sum of the predicted times
of the groups it would replace.

The check applies to CPU targets only (:func:`profitability_for`): the model is calibrated on the
host's CPU, and the DSA has its own judge (its simulator), GPUs their own schedule.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import tvm
from tvm import relax, s_tir, tirx

from ..analysis.graph import DataflowGraph, NodeKind
from ..ir_utils import VarRemapper
from ..relax_passes.materialize_partition import MaterializePartition
from .calibration import load_or_calibrate
from .model import KernelCostModel, Rates

# A fused kernel is refused only when predicted more than this fraction slower than its parts:
# within it the prediction cannot tell them apart, and the paper's decision stands.
SLOWER_MARGIN = 0.05

# One model per target and rates in this process: predictions survive from one compile to the next.
_MODELS: dict[tuple[str, Rates], KernelCostModel] = {}


def group_module(graph: DataflowGraph, group: Iterable[int]) -> tvm.IRModule:
    """A module whose ``main`` runs exactly the bindings of ``group`` (inputs become parameters),
    with the PrimFuncs they call: what the downstream compiler is asked to compile for one group
    (APOLLO's upward feedback) and what :class:`ProfitabilityCheck` fuses."""
    members = sorted(group)
    bindings = [graph.bindings[i] for i in members]
    defined = {b.var for b in bindings}
    inputs = []
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            if v not in defined and v not in inputs:
                inputs.append(v)
    outputs = [graph.bindings[i].var for i in members
               if graph.nodes[i].is_block_output or not set(graph.nodes[i].outputs) <= set(members)]
    outputs = outputs or [bindings[-1].var]
    params = [relax.Var(v.name, v.ty) for v in inputs]
    vmap = dict(zip(inputs, params))
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for b in bindings:
                vmap[b.var] = bb.emit(VarRemapper(vmap).visit_expr(b.value), name_hint=b.var.name)
            result = vmap[outputs[0]] if len(outputs) == 1 else relax.Tuple([vmap[o] for o in outputs])
            out = bb.emit_output(result)
        bb.emit_func_output(out)
    mini = bb.get()
    for i, b in zip(members, bindings):
        if graph.nodes[i].kind is NodeKind.CALL_TIR:
            mini[b.value.args[0]] = graph.nodes[i].prim_func
    return mini


def fused_kernel(graph: DataflowGraph, group: Iterable[int]) -> tirx.PrimFunc | None:
    """The one PrimFunc the pipeline makes of ``group`` (``None`` when it cannot make one)."""
    mini = group_module(graph, group)
    try:
        fused = tvm.transform.Sequential([
            MaterializePartition(lambda g: [[n.index for n in g.nodes
                                             if n.kind in (NodeKind.CALL_TIR, NodeKind.TUPLE_GET_ITEM)]]),
            relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
            s_tir.transform.StmtSimplify()])(mini)
    except Exception:  # noqa: BLE001 - a group the pipeline cannot fuse is no candidate
        return None
    prims = [f for _, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]
    return prims[0] if len(prims) == 1 else None


@dataclass(frozen=True)
class Verdict:
    """Predicted seconds of a group's kernel (``fused_s``, infinite when it cannot be made) and
    of the kernels it replaces (``parts_s``)."""

    fused_s: float
    parts_s: float

    @property
    def profitable(self) -> bool:
        """Not predicted slower than its parts (beyond :data:`SLOWER_MARGIN`)."""
        return self.fused_s <= self.parts_s * (1.0 + SLOWER_MARGIN)

    @property
    def gain_s(self) -> float:
        """Seconds the fusion is predicted to save (negative: to cost)."""
        return self.parts_s - self.fused_s

    def describe(self) -> str:
        fused = "no single kernel" if math.isinf(self.fused_s) else f"{self.fused_s * 1e6:.1f} us"
        return f"predicted {fused} fused against {self.parts_s * 1e6:.1f} us for its parts"


class ProfitabilityCheck:
    """Predicted times of groups of a :class:`DataflowGraph` and the verdict on merging them.

    ``rates`` default to this host's calibration (:func:`.calibration.load_or_calibrate`). Group
    times are cached per graph and member set; kernel predictions per structural hash.
    """

    def __init__(self, target: tvm.target.Target, rates: Rates | None = None):
        rates = rates or load_or_calibrate()
        key = (str(target), rates)
        if key not in _MODELS:
            _MODELS[key] = KernelCostModel(target, rates)
        self.model = _MODELS[key]
        self._groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def group_seconds(self, graph: DataflowGraph, group: Iterable[int]) -> float:
        """Predicted seconds of the kernel ``group`` becomes (0 without a ``call_tir``: tuple
        plumbing launches nothing; infinite when the pipeline cannot make it one kernel)."""
        members = frozenset(group)
        kernels = [m for m in members if graph.nodes[m].kind is NodeKind.CALL_TIR]
        if not kernels:
            return 0.0
        if len(members) == 1:
            return self.model.seconds(graph.nodes[kernels[0]].prim_func)
        cache = self._groups.setdefault(graph, {})
        if members not in cache:
            kernel = fused_kernel(graph, members)
            cache[members] = math.inf if kernel is None else self.model.seconds(kernel)
        return cache[members]

    def verdict(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> Verdict:
        """Merging ``parts`` (disjoint groups) into one kernel, against keeping them apart."""
        parts = [frozenset(p) for p in parts]
        union = frozenset().union(*parts)
        return Verdict(self.group_seconds(graph, union),
                       sum(self.group_seconds(graph, p) for p in parts))

    def accepts(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> bool:
        return self.verdict(graph, parts).profitable


def profitability_for(target: tvm.target.Target | None, enabled: bool = True,
                      rates: Rates | None = None) -> ProfitabilityCheck | None:
    """The check for ``target`` (``None`` when ``enabled`` is off or the target is not a CPU the
    model was calibrated for: a DSA, whose simulator judges, or a GPU)."""
    target = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    if not enabled or target.kind.name != "llvm" or "dsa" in list(target.keys):
        return None
    return ProfitabilityCheck(target, rates)

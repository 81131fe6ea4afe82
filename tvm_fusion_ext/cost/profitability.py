"""The profitability check every fusion strategy consults: is a group's kernel predicted faster
than its parts?

Fusion papers decide from the graph alone (APOLLO's rules and upward feedback, sections 2 and 5;
NeoFlow's Eq. (4); GraphTurbo's Algorithm 2 rules; backward dominator fusion), so they cannot see
that the kernel a group becomes may schedule worse than its parts: two contractions in one kernel
leave one of them without a register tile, a whole recurrent cell in one kernel keeps every
intermediate in memory and loses the per-op tiling. :class:`ProfitabilityCheck` makes the kernel
of a candidate group as the pipeline will (:func:`fused_kernel`: the group's bindings as one
``Primitive`` function, ``FuseTIR``, ``StmtSimplify``), predicts its time under the default
schedule with :class:`~.model.KernelCostModel`, and compares it with the sum of the predicted times
of the groups it would replace.

The check applies to CPU targets only (:func:`profitability_for`): the model is calibrated on the
host's CPU, and the DSA has its own judge (its simulator), GPUs their own schedule.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..hardware.device_costs import cache_dir, host_key
from ..ir_utils import PRIMITIVE_ATTR, VarRemapper
from .calibration import load_or_calibrate
from .model import KernelCostModel, Rates, store_name

# A fused kernel is refused only when predicted more than this fraction slower than its parts:
# within it the prediction cannot tell them apart, and the paper's decision stands.
SLOWER_MARGIN = 0.05

# One model per prediction store (host, target, rates) in this process: predictions survive from
# one compile to the next.
_MODELS: dict[Path, KernelCostModel] = {}


def group_module(graph: DataflowGraph, group: Iterable[int]) -> tvm.IRModule:
    """A module whose ``main`` runs exactly the bindings of ``group`` (inputs become parameters),
    with the PrimFuncs they call: what the downstream compiler is asked to compile for one group
    (APOLLO's upward feedback)."""
    return _group_module(graph, group, lift_constants=False)[0]


def _group_module(graph: DataflowGraph, group: Iterable[int], lift_constants: bool):
    """:func:`group_module` and what ``main``'s parameters stand for (variables, and with
    ``lift_constants`` also the tensor constants the bindings' calls read, in order of first use
    with the variables, as ``MaterializePartition`` lifts them out of a grouped function)."""
    members = sorted(group)
    bindings = [graph.bindings[i] for i in members]
    defined = {b.var for b in bindings}
    inputs = []
    for b in bindings:
        value = b.value
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


def fused_kernel(graph: DataflowGraph, group: Iterable[int]) -> tirx.PrimFunc | None:
    """The one PrimFunc the pipeline makes of ``group`` (``None`` when ``FuseTIR`` cannot make
    one), as the schedule receives it: the group's bindings as a ``Primitive`` function with its
    constants lifted to parameters (as ``MaterializePartition`` does) and passed by the caller,
    ``FuseTIR`` and ``StmtSimplify`` (the ``fuse_tir`` phase), then
    ``AttachAttrLayoutFreeBuffers`` (the CPU backend's first scheduling pass: constant weights
    are packed once, at compile time, not in the kernel). A single ``call_tir`` keeps its own
    PrimFunc, as the pipeline leaves it."""
    members = sorted(group)
    if len(members) == 1 and graph.nodes[members[0]].kind is NodeKind.CALL_TIR:
        mini = relax.transform.AttachAttrLayoutFreeBuffers()(group_module(graph, members))
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
            s_tir.transform.StmtSimplify(), relax.transform.AttachAttrLayoutFreeBuffers()])(bb.get())
    except Exception:  # noqa: BLE001 - a group FuseTIR cannot fuse is no candidate
        return None
    prims = [f for _, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]
    return prims[0] if len(prims) == 1 else None


@dataclass(frozen=True)
class Verdict:
    """Predicted seconds of a group's kernel (``fused_s``, infinite when it cannot be made) and
    of the kernels it replaces (``parts_s``); both ``None`` when nothing is predicted, for the
    reason ``unpredicted`` (see :meth:`ProfitabilityCheck.verdict`), and then the strategy's own
    decision stands."""

    fused_s: float | None
    parts_s: float | None
    unpredicted: str = ""

    @property
    def profitable(self) -> bool:
        """Not predicted slower than its parts (beyond :data:`SLOWER_MARGIN`); true when abstaining."""
        return self.fused_s is None or self.fused_s <= self.parts_s * (1.0 + SLOWER_MARGIN)

    @property
    def gain_s(self) -> float | None:
        """Seconds the fusion is predicted to save (negative: to cost); ``None`` when abstaining."""
        return None if self.fused_s is None else self.parts_s - self.fused_s

    def describe(self) -> str:
        if self.fused_s is None:
            return f"no prediction ({self.unpredicted})"
        fused = "no single kernel" if math.isinf(self.fused_s) else f"{self.fused_s * 1e6:.1f} us"
        return f"predicted {fused} fused against {self.parts_s * 1e6:.1f} us for its parts"


class ProfitabilityCheck:
    """Predicted times of groups of a :class:`DataflowGraph` and the verdict on merging them.

    ``rates`` default to this host's calibration (:func:`.calibration.load_or_calibrate`). A
    group's prediction is remembered (in this process and in the cache directory, see
    :class:`~.model.KernelCostModel`) under its structure (:func:`group_signature`), so a group
    met again - in a repeated layer, a second partitioning pass, a second compile - is neither
    fused nor scheduled again.
    """

    def __init__(self, target: tvm.target.Target, rates: Rates | None = None):
        rates = rates or load_or_calibrate()
        store = cache_dir() / store_name(target, rates, host_key())
        if store not in _MODELS:
            _MODELS[store] = KernelCostModel(target, rates, store)
        self.model = _MODELS[store]
        self._hashes: dict = {}  # PrimFunc -> structural hash, for this check's graphs
        self._groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> {group: s}

    def group_seconds(self, graph: DataflowGraph, group: Iterable[int]) -> float:
        """Predicted seconds of the kernel ``group`` becomes (0 without a ``call_tir``: tuple
        plumbing launches nothing; infinite when the pipeline cannot make it one kernel)."""
        members = frozenset(group)
        known = self._groups.setdefault(graph, {})
        if members not in known:
            known[members] = self._predict(graph, sorted(members))
        return known[members]

    def _predict(self, graph: DataflowGraph, members: list[int]) -> float:
        if not any(graph.nodes[m].kind is NodeKind.CALL_TIR for m in members):
            return 0.0

        def predict():
            kernel = fused_kernel(graph, members)
            return math.inf if kernel is None else self.model.seconds(kernel)

        signature = group_signature(graph, members, self._hash)
        if signature is None:
            return predict()
        return self.model.remembered(signature, predict)

    def verdict(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> Verdict:
        """Merging ``parts`` (disjoint groups) into one kernel, against keeping them apart.

        Nothing is predicted for a group with symbolic shapes (the model cannot count its loop
        trips) nor for one of element-wise, broadcast and injective ops only: its kernel is loop
        nests the default schedule vectorises and parallelises like each op's own, reading each
        intermediate from registers or cache instead of memory, with fewer kernel calls - it is
        never the fusion the schedule degrades (no contraction or reduction to lose a tile)."""
        parts = [frozenset(p) for p in parts]
        union = frozenset().union(*parts)
        if not _static(graph, union):
            return Verdict(None, None, "symbolic shapes")
        if all(graph.nodes[m].pattern <= OpPattern.INJECTIVE for m in union):
            return Verdict(None, None, "element-wise and injective ops only")
        return Verdict(self.group_seconds(graph, union),
                       sum(self.group_seconds(graph, p) for p in parts))

    def accepts(self, graph: DataflowGraph, parts: Iterable[Iterable[int]]) -> bool:
        return self.verdict(graph, parts).profitable

    def _hash(self, func: tirx.PrimFunc) -> int:
        if func not in self._hashes:
            self._hashes[func] = tvm_ffi.structural_hash(func)
        return self._hashes[func]


def _static(graph: DataflowGraph, members) -> bool:
    """Every buffer of the members' PrimFuncs has a static shape."""
    return all(isinstance(dim, tvm.tirx.IntImm)
               for m in members if graph.nodes[m].prim_func is not None
               for param in graph.nodes[m].prim_func.params for dim in param.shape)


def group_signature(graph: DataflowGraph, members: list[int], hash_of=tvm_ffi.structural_hash
                    ) -> str | None:
    """A key that two groups share exactly when :func:`fused_kernel` makes the same kernel of
    them: per member in order, its PrimFunc's structural hash (``hash_of``), where each argument
    comes from (a member, the n-th distinct outside value or constant, with its type) and whether
    its result leaves the group. ``None`` for a group with other bindings than ``call_tir`` and
    tuple-get-item."""
    position = {m: i for i, m in enumerate(members)}
    outside: dict = {}
    items = []
    for m in members:
        node, value = graph.nodes[m], graph.bindings[m].value
        leaves = node.is_block_output or any(c not in position for c in node.outputs)
        if node.kind is NodeKind.TUPLE_GET_ITEM:
            source = value.tuple_value
            producer = next((p for p in node.inputs if graph.bindings[p].var.same_as(source)), None)
            items.append(("item", position.get(producer), value.index, leaves))
            continue
        if node.kind is not NodeKind.CALL_TIR:
            return None
        args = []
        for arg in value.args[1].fields:
            producer = next((p for p in node.inputs if graph.bindings[p].var.same_as(arg)), None)
            if producer in position:
                args.append(("member", position[producer]))
            else:
                args.append(("outside", outside.setdefault(arg, len(outside)), str(arg.ty)))
        items.append((hash_of(node.prim_func), tuple(args), str(value.ty), leaves))
    return "group:" + hashlib.sha256(repr(items).encode()).hexdigest()


def profitability_for(target: tvm.target.Target | None, enabled: bool = True,
                      rates: Rates | None = None) -> ProfitabilityCheck | None:
    """The check for ``target`` (``None`` when ``enabled`` is off or the target is not a CPU the
    model was calibrated for: a DSA, whose simulator judges, or a GPU)."""
    target = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    if not enabled or target.kind.name != "llvm" or "dsa" in list(target.keys):
        return None
    return ProfitabilityCheck(target, rates)

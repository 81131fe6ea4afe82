"""What a fusion strategy did to a model: its kernels, the bindings in each, and why.

:func:`explain` runs a registered strategy's pre-processing and fusion passes (the ``preprocess`` and
``fusion`` phases of :func:`~tvm_fusion_ext.pipelines.fusion_pipeline`, stopping before ``FuseTIR``),
puts the grouped functions back into the caller (:func:`~.inline.inline_groups`) and reads the
partition off the result: one :class:`Group` per kernel, in the order the fused module runs them,
with

* the bytes the group keeps on chip: the kernel-boundary traffic of its ops run one kernel each,
  minus that of the fused kernel (the measure of
  :func:`~tvm_fusion_ext.analysis.kernel_traffic.kernel_traffic`; an intermediate tensor no longer written
  and read back, an input read once instead of once per op);
* what the strategy records about the group, read off its passes without changing them: the
  APOLLO rules that merged it (Table 1 / Table 2 names, ``parallel`` for Layer III,
  :class:`~tvm_fusion_ext.relax_passes.apollo_fusion.ApolloFusion` ``.plans``), NeoFlow's Eq. (4)
  rewards (``NeoFlowFusion.merges``), GraphTurbo's instances and their position in the chosen
  BFS/DFS order (section 3.3, ``GraphTurboFusion.plans``).

Those records are in node ids of the module the strategy partitioned; the graph shown is the one
rebuilt from the fused module, so :func:`match_nodes` pairs the two graphs' nodes by what they
compute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax

from ..analysis.graph import DataflowGraph, NodeKind, build_graphs, tensor_bytes
from ..backends import backend_for
from ..driver.evaluation import parse_target
from ..partitioners.apollo.micro_graphs import apollo_type, op_name
from ..pipelines import get_strategy, preprocess_passes
from ..relax_passes.apollo_fusion import ApolloFusion
from ..relax_passes.graphturbo_fusion import GraphTurboFusion
from ..relax_passes.neoflow_fusion import NeoFlowFusion
from .inline import inline_groups


@dataclass
class Group:
    """One kernel: the bindings it runs (node ids of its block's graph) and what is known of it.

    ``kernel`` is its 1-based position in the fused module's order; ``name`` the grouped function's
    name (``fused_...``) or, for a lone op, its PrimFunc's. ``boundary_bytes``: bytes it reads and
    writes through main memory; ``kept_bytes``: what running its ops as one kernel saves.
    ``instances``: GraphTurbo's instances of it, as 1-based positions in the chosen order.
    """

    kernel: int
    name: str
    members: list[int]
    boundary_bytes: int = 0
    kept_bytes: int = 0
    rule: str = ""
    instances: list[int] = field(default_factory=list)

    @property
    def fused(self) -> bool:
        return len(self.members) > 1


@dataclass
class BlockReport:
    """One dataflow block: its graph (fused functions inlined) and its kernels in order."""

    graph: DataflowGraph
    groups: list[Group]

    def group_of(self) -> dict[int, int]:
        """Node id -> position in :attr:`groups` (nodes that are no kernel's are absent)."""
        return {m: gi for gi, g in enumerate(self.groups) for m in g.members}


@dataclass
class FusionReport:
    """Every kernel a strategy makes of one model's ``main`` (see the module docstring)."""

    model: str
    fusion: str
    target: str
    blocks: list[BlockReport]
    notes: list[str] = field(default_factory=list)
    fused: tvm.IRModule | None = None  # the module after the fusion passes (``FuseTIR`` not run)

    @property
    def groups(self) -> list[Group]:
        return [g for b in self.blocks for g in b.groups]

    @property
    def kernels(self) -> int:
        return len(self.groups)

    @property
    def boundary_bytes(self) -> int:
        return sum(g.boundary_bytes for g in self.groups)

    def rows(self) -> list[dict]:
        """One row per kernel: the table's columns as plain values."""
        rows = []
        for block in self.blocks:
            for g in block.groups:
                nodes = [block.graph.nodes[m] for m in g.members]
                rows.append({"kernel": g.kernel, "group": g.name,
                             "ops": [op_label(block.graph, m) for m in g.members],
                             "apollo_types": type_summary(apollo_type(n).value for n in nodes
                                                          if n.kind is NodeKind.CALL_TIR),
                             "rule": g.rule, "kept_bytes": g.kept_bytes,
                             "instances": list(g.instances)})
        return rows

    def table(self, width: int = 44) -> str:
        """The per-group table ``tvm-fusion explain`` prints (text columns cut to ``width``)."""
        header = ("#", "group", "ops", "APOLLO types", "rule / record", "kept on chip")
        lines = [[str(r["kernel"]), _clip(r["group"], width),
                  _clip(f"{len(r['ops'])}: " + " ".join(r["ops"]), width),
                  _clip(r["apollo_types"], width), _clip(_record(r), width), human_bytes(r["kept_bytes"])]
                 for r in self.rows()]
        widths = [max(len(x) for x in col) for col in zip(header, *lines)]
        fmt = "  ".join(f"{{:{'>' if i in (0, 5) else '<'}{w}}}" for i, w in enumerate(widths))
        out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
        out += [fmt.format(*line).rstrip() for line in lines]
        fused = [g for g in self.groups if g.fused]
        out.append(f"{self.kernels} kernels ({len(fused)} fused), {human_bytes(self.boundary_bytes)} "
                   f"crossing kernel boundaries, {human_bytes(sum(g.kept_bytes for g in self.groups))} "
                   "kept on chip")
        out += self.notes
        return "\n".join(out)


def _record(row: dict) -> str:
    parts = [row["rule"]] if row["rule"] else []
    if row["instances"]:
        parts.append(f"{len(row['instances'])} instances, order {order_ranges(row['instances'])}")
    return "; ".join(parts)


def order_ranges(positions: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5,9"``."""
    out, start = [], None
    for i, p in enumerate(positions):
        if start is None:
            start = p
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            out.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ",".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def human_bytes(n: int) -> str:
    if abs(n) < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if abs(n) < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"


def op_label(graph: DataflowGraph, index: int) -> str:
    """A node's op: its PrimFunc without the numeric suffix of repeats, or its binding kind."""
    node = graph.nodes[index]
    if node.kind is NodeKind.CALL_TIR:
        return op_name(graph, index) or node.name
    return {NodeKind.TUPLE: "tuple", NodeKind.TUPLE_GET_ITEM: "get-item"}.get(node.kind, node.name)


def type_summary(types: Iterable[str]) -> str:
    """``conv, element-wise x2`` for the types of a group's ops, in order of first appearance."""
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    return ", ".join(t if c == 1 else f"{t} x{c}" for t, c in counts.items())


# --------------------------------------------------------------------------------------------
# Running a strategy up to FuseTIR
# --------------------------------------------------------------------------------------------
def prefusion(mod: tvm.IRModule, fusion: str, target: tvm.target.Target,
              base: tvm.IRModule | None = None) -> tvm.IRModule:
    """``mod`` after strategy ``fusion``'s pre-processing (the pipeline's ``preprocess`` phase).

    ``base``: ``mod`` already through the shared pre-processing, reused for strategies without a
    high-level step (their extra step runs after the shared one).
    """
    strategy = get_strategy(fusion)
    with target:
        if base is None or strategy.high_level_preprocess is not None:
            high = strategy.high_level_preprocess(target) if strategy.high_level_preprocess else []
            graph = backend_for(target).graph_passes(target)
            base = tvm.transform.Sequential(preprocess_passes(high, graph))(mod)
        extra = strategy.extra_preprocess(target) if strategy.extra_preprocess else []
        return tvm.transform.Sequential(extra)(base) if extra else base


def explain(mod: tvm.IRModule, fusion: str, target: tvm.target.Target | str = "llvm",
            model: str = "model", base: tvm.IRModule | None = None) -> FusionReport:
    """Run strategy ``fusion`` on ``mod`` up to ``FuseTIR`` and report its kernels.

    ``target``: a ``Target`` or its text (read as ``tvm-fusion compare`` reads it). ``base``: ``mod``
    through the shared pre-processing (see :func:`prefusion`), to save re-running it when
    explaining several strategies.
    """
    label = target if isinstance(target, str) else tvm.target.Target(target).kind.name
    target = parse_target(target)
    strategy = get_strategy(fusion)
    before = prefusion(mod, fusion, target, base)
    passes = strategy.passes(target)
    with target:
        fused = tvm.transform.Sequential(passes)(before) if passes else before
    return report_partition(before, fused, fusion, label, model, passes)


def report_partition(before: tvm.IRModule, fused: tvm.IRModule, fusion: str, target: str,
                     model: str = "model", passes: list | None = None, func_name: str = "main"
                     ) -> FusionReport:
    """The :class:`FusionReport` of ``fused`` (grouped functions, before ``FuseTIR``) made from
    ``before`` by ``passes``."""
    flat, calls = inline_groups(fused, func_name)
    call_of = {var: ci for ci, call in enumerate(calls) for var in call.variables}
    blocks, kernel = [], 0
    for graph in build_graphs(flat, func_name):
        groups = _groups(graph, calls, call_of)
        for g in groups:
            kernel += 1
            g.kernel = kernel
            g.boundary_bytes = boundary_bytes(graph, g.members)
            g.kept_bytes = sum(boundary_bytes(graph, [m]) for m in g.members
                               if graph.nodes[m].kind is NodeKind.CALL_TIR) - g.boundary_bytes
        blocks.append(BlockReport(graph, groups))
    report = FusionReport(model, fusion, target, blocks, fused=fused)
    _annotate(report, before, passes or [], func_name)
    return report


def _groups(graph: DataflowGraph, calls, call_of: dict) -> list[Group]:
    """Kernels of one block in binding order: each inlined call, and each lone ``call_tir``."""
    groups: dict = {}
    for node in graph.nodes:
        ci = call_of.get(graph.bindings[node.index].var)
        if ci is not None:
            groups.setdefault(("call", ci), Group(0, calls[ci].function, [])).members.append(node.index)
        elif node.kind is NodeKind.CALL_TIR:
            groups[("op", node.index)] = Group(0, node.callee, [node.index])
    # A grouped function of tuple plumbing only is no kernel (FuseTIR makes no PrimFunc of it).
    return [g for g in groups.values()
            if any(graph.nodes[m].kind is NodeKind.CALL_TIR for m in g.members)]


def boundary_bytes(graph: DataflowGraph, members: Iterable[int]) -> int:
    """Bytes one kernel running ``members`` moves through main memory: every distinct tensor it
    reads from outside the group, and every member's tensor used outside (or after the block).

    Of a lone ``call_tir`` this is what :func:`~tvm_fusion_ext.analysis.kernel_traffic.kernel_traffic` counts
    (arguments, repeats included, plus the result); of a group, that of the kernel ``FuseTIR``
    makes (one parameter per distinct input, one output per escaping tensor).
    """
    members = sorted(members)
    inside = set(members)
    if len(members) == 1 and graph.nodes[members[0]].kind is NodeKind.CALL_TIR:
        value = graph.bindings[members[0]].value
        return sum(tensor_bytes(a.ty) for a in value.args[1].fields) + tensor_bytes(value.ty)
    defined = {graph.bindings[m].var: m for m in inside}
    inputs: dict = {}
    for m in members:
        node, value = graph.nodes[m], graph.bindings[m].value
        if node.kind is NodeKind.TUPLE_GET_ITEM:
            if value.tuple_value not in defined:  # one item of an outside tuple comes in
                inputs[(value.tuple_value, value.index)] = node.out_bytes
            continue
        fields = value.args[1].fields if node.kind is NodeKind.CALL_TIR else getattr(value, "fields", [])
        for arg in fields:
            if arg not in defined and isinstance(arg, (relax.Var, tvm.ir.Constant)):
                inputs[arg] = tensor_bytes(arg.ty)
    written = sum(graph.nodes[m].out_bytes for m in members
                  if graph.nodes[m].kind is not NodeKind.TUPLE
                  and (graph.nodes[m].is_block_output or not set(graph.nodes[m].outputs) <= inside))
    return sum(inputs.values()) + written


# --------------------------------------------------------------------------------------------
# Pairing the shown graph with the graph the strategy partitioned
# --------------------------------------------------------------------------------------------
def match_nodes(reference: DataflowGraph, graph: DataflowGraph) -> list[int | None]:
    """For each node of ``graph``, the node of ``reference`` computing the same value.

    Two bindings match when they apply the same operator (op, PrimFunc, tuple or item index) to
    matching arguments: nodes already matched, or the same outside value (parameter by name,
    constant or shape by structure). A second binding computing an already matched value (a
    recomputed copy) matches the same node; a binding with no counterpart gets ``None``.
    """
    by_key: dict = {}
    ref_ids: dict = {}
    for node in reference.nodes:
        ref_ids[reference.bindings[node.index].var] = node.index
        by_key.setdefault(_binding_key(reference.bindings[node.index], ref_ids), []).append(node.index)
    taken: set[int] = set()
    matched: list[int | None] = []
    ids: dict = {}
    for node in graph.nodes:
        binding = graph.bindings[node.index]
        candidates = by_key.get(_binding_key(binding, ids), [])
        free = [c for c in candidates if c not in taken]
        pick = free[0] if free else (candidates[0] if candidates else None)
        if pick is not None:
            taken.add(pick)
            ids[binding.var] = pick
        matched.append(pick)
    return matched


def _binding_key(binding, ids: dict):
    key = _expr_key(binding.value, ids)
    return ("match_cast", key, str(binding.ty)) if isinstance(binding, relax.MatchCast) else key


def _expr_key(expr, ids: dict):
    if isinstance(expr, relax.Var):
        return ("node", ids[expr]) if expr in ids else ("var", expr.name)
    if isinstance(expr, relax.Tuple):
        return ("tuple", *(_expr_key(f, ids) for f in expr.fields))
    if isinstance(expr, relax.TupleGetItem):
        return ("item", _expr_key(expr.tuple_value, ids), expr.index)
    if isinstance(expr, relax.Call):
        op = expr.op.name_hint if isinstance(expr.op, tvm.ir.GlobalVar) else str(expr.op)
        return ("call", op, str(expr.attrs), *(_expr_key(a, ids) for a in expr.args))
    if isinstance(expr, tvm.ir.GlobalVar):
        return ("global", expr.name_hint)
    return ("leaf", tvm_ffi.structural_hash(expr))


# --------------------------------------------------------------------------------------------
# What the strategies record
# --------------------------------------------------------------------------------------------
def _annotate(report: FusionReport, before: tvm.IRModule, passes: list, func_name: str) -> None:
    """Fill each group's ``rule`` / ``instances`` from the passes that record them."""
    recorders = [p for p in passes if isinstance(p, (ApolloFusion, GraphTurboFusion, NeoFlowFusion))]
    if not recorders:
        return
    references = {g.block_index: g for g in build_graphs(before, func_name)}
    for block in report.blocks:
        reference = references.get(block.graph.block_index)
        if reference is None:
            continue
        matched = match_nodes(reference, block.graph)
        for g in block.groups:
            original = {matched[m] for m in g.members} - {None}
            for p in recorders:
                if isinstance(p, ApolloFusion):
                    g.rule = _apollo_rules(p, reference, original)
                elif isinstance(p, NeoFlowFusion):
                    g.rule = _neoflow_rewards(p, {reference.nodes[o].name for o in original})
                else:
                    g.instances = _graphturbo_instances(p, reference, original, report.notes)


def _apollo_rules(fusion, reference: DataflowGraph, original: set[int]) -> str:
    """The Table 1 / Table 2 rules (and ``parallel`` stitches) whose merges built the group."""
    for plan in fusion.plans:
        if plan.graph.func_name == reference.func_name and plan.graph.block_index == reference.block_index:
            rules = [m[0] for m in plan.state.merges if set().union(*map(set, m[1:])) <= original]
            return "rules " + type_summary(rules) if rules else ""
    return ""


def _neoflow_rewards(fusion, names: set[str]) -> str:
    """The Eq. (4) rewards of the merges that built the group (seconds saved, estimated)."""
    rewards = [r for r, merged in fusion.merges
               if {n.removesuffix("_recompute") for n in merged} <= names]
    return f"Eq.4 reward {sum(rewards) * 1e6:.2f} us ({len(rewards)} merges)" if rewards else ""


def _graphturbo_instances(fusion, reference: DataflowGraph, original: set[int], notes: list[str]
                          ) -> list[int]:
    """Positions (1-based) of the group's instances in the order GraphTurbo chose (section 3.3)."""
    names = [n.name for n in reference.nodes]
    for plan in fusion.plans:
        if [op.name for op in plan.graph.ops] != names:
            continue
        note = f"GraphTurbo: {plan.order_kind.upper()} instance order, LB peak {human_bytes(plan.lb_peak)}"
        if note not in notes:
            notes.append(note)
        for sg, ops in enumerate(plan.grouping.groups):
            if set(ops) == original:
                position = {inst: k + 1 for k, inst in enumerate(plan.order)}
                return sorted(position[i] for i, inst in enumerate(plan.instances.instances) if inst.sg == sg)
    return []

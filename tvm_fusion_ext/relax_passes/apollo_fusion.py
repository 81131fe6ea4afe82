"""``ApolloFusion``: APOLLO's partition and fusion phases as one Relax pass (apollo-fusion.txt).

For every dataflow block, :class:`~tvm_fusion_ext.partitioners.apollo.ApolloPartitioner` runs the
partition phase (section 3: sub-graph extraction, Algorithm 1 over Table 1) and the enabled fusion
layers (section 4: Layer I, one kernel per micro-graph; Layer II, Algorithm 2 memory stitching;
Layer III, Algorithm 3 parallelism stitching), and the shared
:class:`~.materialize_partition.MaterializePartition` turns the partition into primitive functions
for ``FuseTIR``. A Layer III group of independent branches becomes one group of independent
``call_tir``s: ``FuseTIR`` makes it one PrimFunc with one output per branch.

Upward feedback (sections 2, 4.1, 5): every multi-op group is first compiled on its own by the
downstream compiler (:class:`DownstreamCompiler`: ``FuseTIR``, the default schedule, lowering,
within a time budget). A group fails when any step raises, when the loop-fusion rule of the
default schedule declines it (the kernel would keep one loop nest per op: Layer I's polyhedral
fusion "cannot find a fusion plan", section 6.1; for a Layer III composition, when it declines one
of the branches; groups with symbolic shapes are exempt, as the rule only tiles static shapes), or
when it takes longer than the budget; and, with the profitability check on (``cost_check``, CPU
targets), when its kernel is predicted slower than its ops run as separate kernels
(:class:`~tvm_fusion_ext.cost.ProfitabilityCheck`: the cost model of the scheduled kernel; the
paper's feedback reports what the downstream compiler "cannot handle well", section 2), or when
it holds the element-wise epilogue of a contraction outside it and is predicted slower than that
contraction with its epilogue beside the rest of the group
(:meth:`~tvm_fusion_ext.cost.ProfitabilityCheck.epilogue_verdict`). The prediction is asked
first, so a group it refuses is not compiled. A group that fails has its composition pattern
recorded in the :class:`~tvm_fusion_ext.partitioners.apollo.FeedbackStore` (a JSON file when
``feedback_path`` is set) and the partition is regenerated with that pattern refused, so the
group is split. The next
run reads the file and never tries the pattern again. Parallel compositions that Cost Model (3)
rejected are logged in the same file.

After the feedback, a compound op opened by section 3.2 whose pieces no group fused with another
op is closed again (:mod:`~tvm_fusion_ext.partitioners.apollo.compound_ops`): its pieces become
one kernel, the op's own. With the profitability check on, so is an op of which only some pieces
were fused with other ops, where the check predicts the op's own kernel beside the rest of those
groups faster than the groups as they are.

The pipelines ``apollo`` (Layers I-III), ``apollo-no-parallel`` (I-II) and ``apollo-no-stitch``
(I only) reproduce the ablation of Table 3. Their extra pre-processing (section 3) is
:func:`apollo_preprocess`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence

import tvm
from tvm import relax, tirx

from ..analysis.graph import NodeKind, build_graph, build_graphs, static_shape
from ..cost import ProfitabilityCheck, group_module, profitability_for
from ..hardware import HardwareSpec, spec_for_target
from ..ir_utils import is_external, non_primitive_functions
from ..partitioners.apollo import LAYERS, TABLE_1, ApolloPartitioner, FeedbackStore
from ..partitioners.apollo.compound_ops import close_compound_ops
from ..partitioners.apollo.micro_graphs import composition_pattern, extract_subgraphs, op_name
from ..partitioners.apollo.rules import RuleLevel
from ..registration import register_pass
from .materialize_partition import MaterializePartition
from .open_compound_ops import OpenCompoundOps

# Compiling one micro-graph downstream for longer than this is a failure (section 4.1: "cannot
# finish within a reasonable time"); the pattern is then split.
DEFAULT_COMPILE_BUDGET_S = 60.0

# Feedback rounds: each failing round forbids at least one new pattern and splits the failing
# groups; groups still failing after the last round are split into single ops.
MAX_FEEDBACK_ROUNDS = 16

# A downstream check: (module with the group as its main function, composition pattern) ->
# None when it compiles, else the reason it does not.
DownstreamCheck = Callable[[tvm.IRModule, str], "str | None"]


class DownstreamCompiler:
    """The downstream check of :class:`ApolloFusion`: fuse one group with ``FuseTIR``, schedule it
    with the default schedule (its loop-fusion rule must apply) and lower it for ``target`` within
    ``budget_s`` seconds.

    Results are cached per group (pattern and tensor types), so a pattern repeated across layers
    of a model is compiled once. ``schedule_rules`` replaces the default schedule's rule list.
    ``schedule_passes``: the target's own scheduling passes (a backend's ``untuned`` schedule, e.g.
    the DSA staging schedule or dlight's GPU rules), which replace the default CPU schedule: the
    group is then compiled as that target compiles kernels, and only has to compile in time (the
    loop-fusion requirement belongs to the CPU schedule).
    """

    def __init__(self, target: tvm.target.Target, spec: HardwareSpec,
                 budget_s: float = DEFAULT_COMPILE_BUDGET_S, schedule_rules: list | None = None,
                 schedule_passes: list | None = None):
        self.target = target
        self.spec = spec
        self.budget_s = budget_s
        self.schedule_rules = schedule_rules
        self.schedule_passes = schedule_passes
        self._cache: dict[str, str | None] = {}

    def __call__(self, mini: tvm.IRModule, pattern: str) -> str | None:
        key = pattern + "|" + str(mini["main"].ty)
        if key not in self._cache:
            self._cache[key] = self._check(mini)
        return self._cache[key]

    def _check(self, mini: tvm.IRModule) -> str | None:
        """A connected group of static shape must be loop-fused. A Layer III composition (several
        independent branches side by side) has nothing to fuse across branches: each branch of
        several ops must be loop-fused, and the composition must compile."""
        graph = build_graph(mini)
        branches = extract_subgraphs(graph)
        if len(branches) == 1:
            static = all(static_shape(p.ty) is not None for p in mini["main"].params)
            return self._compile(mini, loop_fused=static)
        for branch in branches:
            if len(branch) > 1:
                reason = self(group_module(graph, branch), composition_pattern(graph, branch))
                if reason is not None:
                    return f"branch {composition_pattern(graph, branch)}: {reason}"
        return self._compile(mini, loop_fused=False)

    def _compile(self, mini: tvm.IRModule, loop_fused: bool) -> str | None:
        from ..tir_passes.default_schedule import DefaultSchedule
        from ..tir_passes.loop_fusion import AnchorLoopFusion

        start = time.perf_counter()
        try:
            fused = tvm.transform.Sequential([
                MaterializePartition(lambda g: [[n.index for n in g.nodes if n.kind is NodeKind.CALL_TIR]]),
                relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])(mini)
            prims = {gv.name_hint: f for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)}
            if len(prims) != 1:
                return f"FuseTIR produced {len(prims)} kernels instead of one"
            (name, prim), = prims.items()
            kernel = tvm.IRModule({name: prim.with_attr("global_symbol", name)})
            schedule = DefaultSchedule(self.target, self.spec, self.schedule_rules) \
                if self.schedule_passes is None else None
            with self.target:
                kernel = tvm.transform.Sequential([schedule] if schedule else self.schedule_passes)(kernel)
                tvm.compile(kernel, target=self.target)
            if loop_fused and schedule is not None and not schedule.stats[AnchorLoopFusion.__name__]:
                return f"the loop-fusion pass declined ({', '.join(schedule.stats)} instead)"
        except Exception as err:  # noqa: BLE001 - any downstream failure is feedback, not a crash
            return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        elapsed = time.perf_counter() - start
        if elapsed > self.budget_s:
            return f"compiling took {elapsed:.1f} s, over the {self.budget_s:.0f} s budget"
        return None


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.ApolloFusion")
class ApolloFusion:
    """APOLLO fusion (see the module docstring).

    ``layers``: the fusion layers to run, ``"I"`` required. ``feedback_path``: JSON feedback file
    read before and written after partitioning (``None``: feedback kept in memory for this run).
    ``spec``: hardware spec (default: that of the current target). ``downstream``: the check each
    group must pass (default :class:`DownstreamCompiler`; ``check_downstream=False`` skips it).
    ``cost_check``: a group whose kernel is predicted slower than its ops is a failure too (CPU
    targets; ``profitability`` replaces the check, e.g. with fixed rates).
    ``rules``: Table 1, as rule levels. ``stats`` counts rules fired, stitches, feedback splits and
    Layer II allocations of the last run; ``plans`` keeps its per-block plans (merges with the rule
    that made each, for ``tvm-fusion explain``).
    """

    def __init__(self, layers: Sequence[str] = LAYERS, feedback_path: str | None = None,
                 spec: HardwareSpec | None = None, downstream: DownstreamCheck | None = None,
                 rules: Sequence[RuleLevel] = TABLE_1, check_downstream: bool = True,
                 cost_check: bool = True, profitability: ProfitabilityCheck | None = None):
        self.layers = tuple(layers)
        self.feedback_path = feedback_path
        self.spec = spec
        self.downstream = downstream
        self.rules = tuple(rules)
        self.check_downstream = check_downstream
        self.cost_check = cost_check
        self.profitability = profitability
        self.stats: Counter = Counter()
        self.checked_patterns: list[str] = []
        self.plans: list = []

    def transform_module(self, mod, _ctx) -> tvm.IRModule:
        target = tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
        spec = self.spec or spec_for_target(target)
        store = FeedbackStore(self.feedback_path)
        check = self.downstream or DownstreamCompiler(target, spec)
        profit = (self.profitability or profitability_for(target)) if self.cost_check else None
        self.stats = Counter()
        self.checked_patterns = []
        graphs = [graph for gvar, func in non_primitive_functions(mod) if not is_external(func)
                  for graph in build_graphs(mod, gvar.name_hint)]
        for _ in range(MAX_FEEDBACK_ROUNDS):
            partitioner = ApolloPartitioner(spec, self.layers, self.rules, forbidden=store.forbidden())
            plans = {(g.func_name, g.block_index): partitioner.plan(g) for g in graphs}
            failing = self._check(plans, check, profit, store) \
                if self.check_downstream or profit is not None else {}
            if not failing:
                break
            self.stats["feedback_splits"] += sum(len(f) for f in failing.values())
        groups = {}
        for key, plan in plans.items():
            judge = None if profit is None else _closing_judge(plan.graph, profit)
            groups[key], closed = close_compound_ops(plan.graph, _split(plan.groups, failing.get(key, [])),
                                                     closing_pays=judge)
            self.stats["compound_ops_closed"] += closed
        self._count(partitioner, store)
        self.plans = list(partitioner.plans)
        store.save()
        return MaterializePartition(lambda g: groups.get((g.func_name, g.block_index), []))(mod)

    def _check(self, plans: dict, check: DownstreamCheck, profit: ProfitabilityCheck | None,
               store: FeedbackStore) -> dict:
        """Groups of each block the downstream compiler rejects or ``profit`` predicts slower than
        their ops (their patterns go to ``store``)."""
        failing: dict = {}
        for key, plan in plans.items():
            for group in plan.groups:
                if len(group) < 2:
                    continue
                pattern = composition_pattern(plan.graph, group)
                self.checked_patterns.append(pattern)
                reason = self._cost_reason(plan.graph, group, profit) if profit is not None else None
                if reason is None and self.check_downstream:
                    reason = check(group_module(plan.graph, group), pattern)
                if reason is not None:
                    store.record_failure(pattern, reason, [op_name(plan.graph, n) for n in sorted(group)])
                    failing.setdefault(key, []).append(group)
        return failing

    def _cost_reason(self, graph, group: list[int], profit: ProfitabilityCheck) -> str | None:
        """Why ``profit`` refuses ``group`` (``None``: it does not). Asked before the downstream
        compile, so a group refused for its predicted time is never compiled (its verdict comes
        from the prediction store on a second compile of the model); a group predicted to make no
        single kernel is left to the downstream compiler, whose error is the better reason."""
        verdict = profit.verdict(graph, [[n] for n in group], final=True)
        if self.check_downstream and verdict.fused_s is not None and math.isinf(verdict.fused_s):
            return None
        if not verdict.profitable:
            self.stats["cost_rejected"] += 1
            return f"slower than its ops: {verdict.describe()}"
        epilogue = profit.epilogue_verdict(graph, group)
        if epilogue is not None and not epilogue.profitable:
            self.stats["cost_rejected"] += 1
            return (f"takes a contraction's epilogue: predicted {epilogue.fused_s * 1e6:.1f} us "
                    f"against {epilogue.parts_s * 1e6:.1f} us with the epilogue in the contraction")
        return None

    def _count(self, partitioner: ApolloPartitioner, store: FeedbackStore) -> None:
        for plan in partitioner.plans:
            for merge in plan.state.merges:
                self.stats[f"rule_{merge[0]}"] += 1
            self.stats["micro_graphs"] += sum(
                1 for g in plan.layer1 if any(plan.graph.nodes[n].kind is NodeKind.CALL_TIR for n in g))
            self.stats["groups"] += len(plan.groups)
            if plan.memory is not None:
                for alloc in plan.memory.allocations:
                    self.stats[f"stitched_{alloc.memory}"] += 1
            if plan.parallel is not None:
                for ops, value in plan.parallel.rejected:
                    store.record_rejected_parallel(
                        tuple(composition_pattern(plan.graph, op) for op in ops), value)
                    self.stats["parallel_rejected"] += 1


def _split(groups: list[list[int]], failing: list[list[int]]) -> list[list[int]]:
    """The partition with the groups still failing after the last feedback round split into
    single ops (each op alone is what the downstream compiler handles without fusion)."""
    bad = {tuple(g) for g in failing}
    return [g for g in groups if tuple(g) not in bad]


def _closing_judge(graph, profit: ProfitabilityCheck):
    """Close an op partly fused with other ops where ``profit`` predicts its own kernel beside the
    rest of its groups faster than its groups as they are."""
    def closing_pays(current, closed) -> bool:
        gain = profit.regrouping_verdict(graph, current, closed).gain_s
        return gain is not None and gain > 0
    return closing_pays


def apollo_preprocess(_target=None) -> list:
    """Section 3's pre-processing beyond the shared one (which already folds constants): open
    compound ops (section 3.2), then common-subexpression elimination and dead-code elimination
    over the opened graph; ``AnnotateTIROpPattern`` types the new PrimFuncs. Algebraic
    simplification and layout transformation are not done: Relax has no general algebraic
    simplifier, and legalized TIR already keeps producer and consumer layouts aligned."""
    return [OpenCompoundOps(), relax.transform.CanonicalizeBindings(),
            relax.transform.EliminateCommonSubexpr(), relax.transform.DeadCodeElimination(),
            relax.transform.AnnotateTIROpPattern()]


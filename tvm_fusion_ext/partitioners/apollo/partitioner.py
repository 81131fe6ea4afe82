"""APOLLO's partition of one dataflow block through the enabled layers (Fig. 2).

Partition phase: sub-graph extraction (section 3.1) and Algorithm 1 over Table 1 (section 3.3)
give Layer I's micro-graphs, one kernel each. Layer II (Algorithm 2) stitches reductions with
their consumers; Layer III (Algorithm 3) stitches independent micro-graphs side by side. The result
is a partition of the graph's nodes for
:class:`~tvm_fusion_ext.relax_passes.materialize_partition.MaterializePartition`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ...analysis.graph import DataflowGraph
from ...hardware import HardwareSpec
from .aggregation import aggregate
from .cost_model import CostModel, RooflineCostModel
from .memory_stitching import LoopFacts, StitchReport, loop_facts, stitch_memory
from .micro_graphs import MicroGraphs
from .parallel_stitching import ParallelReport, stitch_parallel
from .rules import TABLE_1, TABLE_2, RuleLevel

LAYERS = ("I", "II", "III")


def check_layers(layers: Iterable[str]) -> tuple[str, ...]:
    """Layers in order; Layer I is required (each higher layer works on its outputs)."""
    layers = tuple(layers)
    unknown = [x for x in layers if x not in LAYERS]
    if unknown or "I" not in layers:
        raise ValueError(f"layers must include 'I' and come from {LAYERS}; got {layers}")
    return tuple(x for x in LAYERS if x in layers)


@dataclass
class BlockPlan:
    """APOLLO's decisions for one dataflow block (kept for reports and tests)."""

    graph: DataflowGraph
    state: MicroGraphs
    layer1: list[list[int]]
    memory: StitchReport | None = None
    parallel: ParallelReport | None = None
    groups: list[list[int]] = field(default_factory=list)


class ApolloPartitioner:
    """``partitioner(graph) -> groups`` running the enabled layers (see the module docstring).

    ``facts`` / ``cost_model`` default to those read off IR graphs (:func:`.loop_facts`,
    :class:`.RooflineCostModel`); tests on hand-built graphs pass their own.
    """

    def __init__(self, spec: HardwareSpec, layers: Sequence[str] = LAYERS,
                 rules: Sequence[RuleLevel] = TABLE_1, stitch_rules: Sequence[RuleLevel] = TABLE_2,
                 forbidden: Iterable[str] = (),
                 facts: Callable[[DataflowGraph], Mapping[int, LoopFacts]] = loop_facts,
                 cost_model: Callable[[DataflowGraph], CostModel] | None = None):
        self.spec = spec
        self.layers = check_layers(layers)
        self.rules = tuple(rules)
        self.stitch_rules = tuple(stitch_rules)
        self.forbidden = frozenset(forbidden)
        self.facts = facts
        self.cost_model = cost_model or (lambda graph: RooflineCostModel(graph, spec))
        self.plans: list[BlockPlan] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        return self.plan(graph).groups

    def plan(self, graph: DataflowGraph) -> BlockPlan:
        state = aggregate(MicroGraphs(graph, self.forbidden), self.rules)
        plan = BlockPlan(graph, state, state.partition())
        if "II" in self.layers:
            plan.memory = stitch_memory(state, self.facts(graph), self.spec, self.stitch_rules)
        if "III" in self.layers:
            plan.parallel = stitch_parallel(state, self.cost_model(graph))
        plan.groups = state.partition()
        self.plans.append(plan)
        return plan

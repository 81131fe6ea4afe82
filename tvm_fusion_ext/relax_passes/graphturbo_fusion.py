"""``GraphTurboFusion`` and the ``graphturbo`` strategies (graphturbo-dsa-scheduling.txt sections 3-5).

Each dataflow block is partitioned into GraphTurbo's sub-graphs (Algorithm 2 with SplitInfo /
BestSplit, :mod:`tvm_fusion_ext.partitioners.graphturbo`) and every sub-graph becomes one kernel
through the shared :class:`~.materialize_partition.MaterializePartition` and ``FuseTIR``. The
sub-graph plans of sections 3.3-3.4 (BestSplit instances, Algorithm 4's binding and output scope,
Fig. 15's switches) are stored as the module attribute ``graphturbo.plans`` (grouped function name
-> JSON, which ``FuseTIR`` keeps along with the names); on a DSA target the kernel generator
(:mod:`tvm_fusion_ext.target_dsa.instance_schedule`) turns each sub-graph into its instances,
bound to cores, with layer outputs stitched in LB and weights promoted.

Hardware awareness per target (section 3.6):

* **DSA**: the batch is split across the ``d`` clusters (data parallelism, section 2.1: GraphTurbo
  schedules one cluster's share) and an instance is bound to the ``c`` cores of its cluster
  (Algorithm 4's factors 8/4/2/1), keeping its tensors in their LBs. Algorithm 1 on one cluster's
  share against ``c`` LBs is Algorithm 1 on the whole graph against all ``d * c`` LBs, so
  ``sizeof(LB)`` is ``num_cores * lb_bytes`` here; no cap on sub-graph size. Sub-graphs none of
  whose splits fits LB are grouped against ``clusters * gb_bytes`` of GB instead (section 3.6;
  :mod:`~tvm_fusion_ext.partitioners.graphturbo.grouping`). The simulator
  judges the kernels: a kernel of several anchors (an SG, or a chain of SGs) is kept only where it
  simulates in at most the cycles of its parts as kernels of their own (a chain's SGs, an SG's
  layers; :meth:`~tvm_fusion_ext.partitioners.graphturbo.GraphTurboPartitioner.judge`), each
  scheduled as :class:`~tvm_fusion_ext.target_dsa.schedule.DSASchedule` would
  (:func:`dsa_kernel_cost`).
* **CPU** (``llvm``): LB is the per-core cache of the CPU spec (``fast_memory_bytes``). The CPU
  kernel generator (the default schedule) has no instance loop and tiles one anchor op per kernel
  (section 4.1); the other reductions of a multi-anchor kernel would run as plain loop nests. A
  sub-graph therefore holds at most one anchor op (conv, matmul, reduction) on CPU targets, with
  every element-wise op around it that the rules admit; no chains. With the profitability check
  on (``cost_check``), a merge the rules allow is made only where the merged kernel is not
  predicted slower than the SGs' kernels under the default schedule (:mod:`tvm_fusion_ext.cost`);
  on a DSA the simulator judges the kernels and the check does not apply.

Strategies (Fig. 15, section 5.3): ``graphturbo`` (everything), ``graphturbo-instances`` (no
across-layer instruction scheduling), ``graphturbo-lb`` (no instance splitting either: no BestSplit
instances and no chains, layers tiled over the cores, whole or one image at a time, with layer
outputs in LB where they fit), ``graphturbo-gb`` (layer
outputs kept in GB, "LLB only").
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..analysis.graph import DataflowGraph
from ..cost import ProfitabilityCheck, fused_kernel, profitability_for
from ..hardware.spec import spec_for_target
from ..ir_utils import is_primitive
from ..partitioners.graphturbo import GraphTurboPartitioner
from ..partitioners.graphturbo.kernel_plan import PLANS_ATTR, KernelOptions
from ..partitioners.graphturbo.partitioner import KernelCost
from ..registration import register_pass
from ..target_dsa.schedule import schedule_kernels
from ..target_dsa.spec import DSASpec
from .materialize_partition import MaterializePartition


def dsa_kernel_cost(spec: DSASpec, jobs: int | None = None) -> KernelCost:
    """The simulated cycles of each group's kernel on the DSA ``spec``: the PrimFunc ``FuseTIR``
    makes of the group (:func:`~tvm_fusion_ext.cost.fused_kernel`, without the CPU's weight
    packing) scheduled with its GraphTurbo plan as ``DSASchedule`` would, a batch at a time on
    ``jobs`` worker processes (:func:`~tvm_fusion_ext.target_dsa.schedule.schedule_kernels`)."""

    def costs(graph: DataflowGraph, requests: list[tuple[tuple[int, ...], str | None]]) -> list[int | None]:
        funcs = [fused_kernel(graph, list(ops), layout_free=False) for ops, _ in requests]
        made = [(func, plan_json) for func, (_, plan_json) in zip(funcs, requests) if func is not None]
        cycles = iter(cycles for _, _, cycles in schedule_kernels(made, spec, jobs))
        return [None if func is None else next(cycles) for func in funcs]

    return costs


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.GraphTurboFusion")
class GraphTurboFusion:
    """Group every dataflow block into GraphTurbo sub-graphs (module docstring).

    ``lb_bytes`` / ``cores``: override the LB an instance may fill (Algorithm 1) and the cores per
    cluster (Algorithm 4); ``max_ops`` caps a sub-graph's op count (default: no cap on DSA targets,
    the CPU rule of the module docstring elsewhere); ``options``: Fig. 15's switches;
    ``cost_check``: merges consult the profitability check on CPU targets (``profitability``
    replaces it, e.g. with fixed rates); ``jobs``: worker processes the DSA's kernel generator
    judges kernels on (None: :func:`~tvm_fusion_ext.target_dsa.workers.default_jobs`).
    """

    def __init__(self, lb_bytes: int | None = None, cores: int | None = None,
                 max_ops: int | None = None, options: KernelOptions | None = None,
                 cost_check: bool = True, profitability: ProfitabilityCheck | None = None,
                 jobs: int | None = None):
        self.lb_bytes = lb_bytes
        self.cores = cores
        self.max_ops = max_ops
        self.options = options or KernelOptions()
        self.cost_check = cost_check
        self.profitability = profitability
        self.jobs = jobs
        self.plans: list = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        target = tvm.target.Target.current(allow_none=True)
        spec = spec_for_target(target)
        dsa = target is not None and "dsa" in target.keys
        cores = self.cores or getattr(spec, "cores_per_cluster", spec.num_cores)
        lb = self.lb_bytes or spec.fast_memory_bytes * (spec.num_cores if dsa else 1)
        profit = None
        if self.cost_check and not dsa:
            profit = self.profitability or profitability_for(target)
        partitioner = GraphTurboPartitioner(lb, cores, self.max_ops, self.options,
                                            single_anchor=not dsa, chain=dsa,
                                            accept=profit.accepts if profit is not None else None,
                                            kernel_cost=dsa_kernel_cost(spec, self.jobs) if dsa else None,
                                            gb_bytes=spec.clusters * spec.gb_bytes if dsa else None)
        out = MaterializePartition(partitioner)(mod)
        self.plans.extend(partitioner.plans)
        kernels = {key: p for block in partitioner.plans for key, p in block.kernels.items()}
        plans = {}
        for gvar, func in out.functions_items():
            if not isinstance(func, relax.Function):
                continue
            grouped = is_primitive(func)
            calls = [str(b.value.args[0].name_hint) for block in func.body.blocks
                     for b in block.bindings if isinstance(b.value, relax.Call)
                     and b.value.args and isinstance(b.value.args[0], tvm.ir.GlobalVar)]
            if grouped and tuple(calls) in kernels:
                plans[gvar.name_hint] = kernels[tuple(calls)].to_json()
            elif not grouped:  # kernels of one op keep their PrimFunc
                plans.update({c: kernels[(c,)].to_json() for c in calls if (c,) in kernels})
        return out.with_attr(PLANS_ATTR, plans) if plans else out


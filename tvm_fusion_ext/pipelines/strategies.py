"""Every fusion strategy of the package, registered in the order ``fusion_names()`` lists them.

Each strategy is the fusion step of the shared pipeline (:mod:`.phases`): ``none`` and ``stock``
(TVM's own ``FuseOps``), the dominator-tree port and its backward variants
(:mod:`~tvm_fusion_ext.relax_passes.fuse_ops_dominator`), APOLLO's Table 3 ablation
(:mod:`~tvm_fusion_ext.relax_passes.apollo_fusion`), NeoFlow
(:mod:`~tvm_fusion_ext.relax_passes.neoflow_fusion`) and GraphTurbo's Fig. 15 variants
(:mod:`~tvm_fusion_ext.relax_passes.graphturbo_fusion`). The passes never import this module.

Every strategy with a decision point in its paper (APOLLO's upward feedback, NeoFlow's Eq. (4),
GraphTurbo's merges on CPU targets, backward dominator fusion) consults the profitability check of
:mod:`tvm_fusion_ext.cost` there; ``cost_check=False`` (``--no-cost-check``) gives the decisions as
the papers wrote them.
"""

from __future__ import annotations

from tvm import relax

from ..backends.cpu import CPUBackend
from ..backends.registry import backend_for
from ..hardware import spec_for_target
from ..partitioners.graphturbo.kernel_plan import VARIANTS
from ..relax_passes.apollo_fusion import ApolloFusion, DownstreamCompiler, apollo_preprocess
from ..relax_passes.fuse_ops_dominator import FuseOpsDominator
from ..relax_passes.graphturbo_fusion import GraphTurboFusion
from ..relax_passes.neoflow_fusion import NeoFlowFusion
from ..relax_passes.parallel_fusion import ParallelFusion
from ..relax_passes.schedule_execution_order import ScheduleExecutionOrder
from ..relax_passes.simplify import Simplify
from .registration import register_fusion


@register_fusion("none", "no fusion: every primitive op is its own kernel")
def _no_fusion(target):
    return []


@register_fusion("stock", "TVM's own FuseOps (post-dominator fusion), as in static_shape_tuning_pipeline")
def _stock_fusion(target):
    return [relax.transform.FuseOps()]


# ---- dominator-tree fusion (tvm-backward-operator-fusion sections 4, 5 and 7) --------------------
@register_fusion("dominator-forward",
                 "Python port of Relax FuseOps: each op fuses into its immediate post-dominator")
def _dominator_forward(target):
    return [FuseOpsDominator(direction="forward")]


@register_fusion("dominator-backward",
                 "backward fusion: each op fuses into its immediate pre-dominator (mirrored FuseOps "
                 "rules); a backward merge is kept only where its kernel is predicted no slower",
                 cost_checked=True)
def _dominator_backward(target, cost_check=True):
    return [FuseOpsDominator(direction="backward", cost_check=cost_check)]


@register_fusion("dominator-both",
                 "forward (post-dominator) fusion, then backward (pre-dominator) fusion of what is "
                 "left, a backward merge kept only where its kernel is predicted no slower",
                 cost_checked=True)
def _dominator_both(target, cost_check=True):
    return [FuseOpsDominator(direction="both", cost_check=cost_check)]


# ---- APOLLO (apollo-fusion.txt, Table 3's ablation) ---------------------------------------------
APOLLO_PREPROCESS_NOTE = ("; extra pre-processing: compound ops opened into primitive ops at the TIR "
                          "level, CSE and DCE (section 3)")


@register_fusion("apollo", "APOLLO: Table 1 micro-graphs (Layer I), memory stitching (Layer II), "
                 "parallelism stitching (Layer III), with upward feedback" + APOLLO_PREPROCESS_NOTE,
                 extra_preprocess=apollo_preprocess, cost_checked=True)
def _apollo(target, cost_check=True):
    return [ApolloFusion(("I", "II", "III"), cost_check=cost_check, downstream=_downstream(target))]


@register_fusion("apollo-no-parallel", "APOLLO Layers I and II (no parallelism stitching)"
                 + APOLLO_PREPROCESS_NOTE, extra_preprocess=apollo_preprocess, cost_checked=True)
def _apollo_no_parallel(target, cost_check=True):
    return [ApolloFusion(("I", "II"), cost_check=cost_check, downstream=_downstream(target))]


@register_fusion("apollo-no-stitch", "APOLLO Layer I only (Table 1 micro-graphs, no stitching)"
                 + APOLLO_PREPROCESS_NOTE, extra_preprocess=apollo_preprocess, cost_checked=True)
def _apollo_no_stitch(target, cost_check=True):
    return [ApolloFusion(("I",), cost_check=cost_check, downstream=_downstream(target))]


def _downstream(target) -> DownstreamCompiler | None:
    """APOLLO's downstream compiler (sections 2 and 5) is the target's own: off the CPU a group is
    scheduled by its backend's ``untuned`` passes (the DSA staging schedule, dlight's GPU rules),
    not by the CPU schedule that :class:`ApolloFusion`'s default check uses."""
    backend = backend_for(target)
    if isinstance(backend, CPUBackend):
        return None
    return DownstreamCompiler(target, spec_for_target(target),
                              schedule_passes=backend.schedule_passes(target, "untuned"))


# ---- NeoFlow (neoflow-training-compilation sections 4.3, 5.1) -----------------------------------
def _neoflow_high_level(target) -> list:
    """NeoFlow's pre-processing on high-level Relax: simplification, parallel fusion of ops sharing
    an input, simplification again (it removes the concat-of-slices parallel fusion may leave)."""
    return [Simplify(), ParallelFusion(), Simplify()]


@register_fusion(
    "neoflow",
    "NeoFlow: greedy fusion by best Eq. (4) reward with measured Pd/Pc/L; own pre-processing on "
    "high-level Relax: MindSpore simplification, parallel fusion of ops sharing an input, "
    "simplification again; then MindSpore BFS/DFS execution order by peak memory",
    high_level_preprocess=_neoflow_high_level, cost_checked=True)
def _neoflow(target, cost_check=True):
    return [NeoFlowFusion(cost_check=cost_check), ScheduleExecutionOrder()]


# ---- GraphTurbo (graphturbo-dsa-scheduling.txt section 5.3, Fig. 15) ----------------------------
def _register_graphturbo(name: str, variant: str, description: str) -> None:
    options = VARIANTS[variant]

    @register_fusion(name, description, cost_checked=True)
    def _strategy(target, cost_check=True):
        return [GraphTurboFusion(options=options, cost_check=cost_check)]


_register_graphturbo(
    "graphturbo", "full",
    "GraphTurbo: sub-graphs grouped by straight/diamond/branch merges under SplitInfo "
    "(rules (i)/(ii)); on a DSA each runs as its instances bound to cores, layer outputs "
    "stitched in LB, weights promoted, across-layer instruction scheduling (Fig. 15 'all')")
_register_graphturbo(
    "graphturbo-instances", "instances",
    "GraphTurbo Fig. 15 third bar: instances and buffer stitching, no across-layer "
    "instruction scheduling")
_register_graphturbo(
    "graphturbo-lb", "lb",
    "GraphTurbo Fig. 15 second bar: layer outputs kept in LB where they fit (layers tiled one "
    "image at a time), sub-graphs not split into BestSplit's instances nor chained, no "
    "instruction scheduling")
_register_graphturbo(
    "graphturbo-gb", "gb",
    "GraphTurbo Fig. 15 first bar: layer outputs kept in GB (LLB), no instances, no "
    "instruction scheduling")

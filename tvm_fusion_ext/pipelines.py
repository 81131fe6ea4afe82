"""Fusion strategies and the complete Relax pipelines built around them.

Every strategy shares the same pre-processing (what ``relax.pipeline.static_shape_tuning_pipeline``
runs before fusion) and the same lowering after fusion, so the fusion step is the only difference
between two strategies compiled under the same scheduling policy::

    pre-processing   DecomposeOpsForInference, CanonicalizeBindings, LegalizeOps,
                     AnnotateTIROpPattern, FoldConstant
    fusion           the strategy's passes (stock: FuseOps), then FuseTIR and StmtSimplify
                     (index expressions simplified with the block domains: the reshapes FuseTIR
                     copies in keep ``(i // 768 + j) % 128``-style indices that block loop fusion)
    scheduling       the policy: "unscheduled" | "untuned" | "tuned" (the last two end with
                     VectorErf and VectorExp: float32 erf and exp as vectorisable
                     polynomials on CPUs)
    lowering         TVM's CPU dataflow-lowering and finalize passes

Strategies register themselves with :func:`register_fusion`; each one is then reachable as
``tvm_fusion_ext.pipeline(name, target)`` and as ``relax_pipeline="tvm_fusion_ext.<name>"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax, s_tir

from .instrument import run_checked
from .registration import register_relax_pipeline
from .relax_passes.fold_batch_norm import FoldBatchNormIntoConv

POLICIES = ("unscheduled", "untuned", "tuned")
# The phases of every pipeline, in order; each runs as a Sequential named PHASE_PREFIX + phase.
PHASES = ("preprocess", "fusion", "fuse_tir", "schedule", "lowering")
PHASE_PREFIX = "tvm_fusion_ext.phase."
DEFAULT_POLICY = "untuned"

FusionPasses = Callable[[tvm.target.Target], list]


@dataclass(frozen=True)
class FusionStrategy:
    """A named fusion strategy: the passes that run between pre-processing and ``FuseTIR``."""

    name: str
    description: str
    fusion_passes: FusionPasses
    # Extra pre-processing a strategy needs (e.g. APOLLO's simplifications); said in the description.
    extra_preprocess: FusionPasses | None = None
    # Extra pre-processing on high-level Relax, before LegalizeOps (e.g. NeoFlow's graph
    # simplification and parallel fusion, which rewrite Relax ops); said in the description.
    high_level_preprocess: FusionPasses | None = None


# ``importlib.reload`` of this module keeps the registry: the modules that registered strategies
# stay imported and do not register them again.
_STRATEGIES: dict[str, FusionStrategy] = globals().get("_STRATEGIES", {})


def register_fusion(name: str, description: str, extra_preprocess: FusionPasses | None = None,
                    high_level_preprocess: FusionPasses | None = None):
    """Decorator registering ``fn(target) -> [Pass, ...]`` as the fusion step of strategy ``name``.

    ``extra_preprocess`` runs after the shared pre-processing (on legalized ``call_tir``s);
    ``high_level_preprocess`` runs on high-level Relax ops, just before ``LegalizeOps``.
    """

    def _register(fn: FusionPasses) -> FusionPasses:
        _STRATEGIES[name] = FusionStrategy(name, description, fn, extra_preprocess,
                                           high_level_preprocess)
        register_relax_pipeline(name, lambda: pipeline(name))
        return fn

    return _register


def fusion_names() -> list[str]:
    """Names of all registered fusion strategies, in registration order."""
    return list(_STRATEGIES)


def get_strategy(name: str) -> FusionStrategy:
    if name not in _STRATEGIES:
        raise ValueError(f"unknown fusion strategy {name!r}; known: {', '.join(_STRATEGIES)}")
    return _STRATEGIES[name]


def preprocess_passes(high_level: list | None = None) -> list:
    """Pre-processing shared by every strategy (TVM's own pre-tuning recipe, before FuseOps);
    a strategy's ``high_level`` passes go in just before ``LegalizeOps``."""
    return [
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        *(high_level or []),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]


def schedule_passes(target: tvm.target.Target, policy: str) -> list:
    """TIR scheduling for one policy; applied identically to every strategy."""
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
    if "dsa" in target.keys:
        from .target_dsa import pipeline as dsa

        return dsa.schedule_passes(target, policy)
    if policy == "unscheduled":
        return []
    if policy == "tuned":
        # Records are applied from the MetaSchedule database in scope (``ms.database``); whatever
        # the database lacks falls back to the untuned default schedule below.
        return [relax.transform.MetaScheduleApplyDatabase(enable_warning=False),
                *schedule_passes(target, "untuned")]
    from .tir_passes.default_schedule import default_schedule_pass
    from .tir_passes.vector_erf import VectorErf
    from .tir_passes.vector_exp import VectorExp

    # Weights are marked layout-free before the schedule packs them, and their packing is split
    # out of the kernels and folded into constants after it (the order of TVM's
    # relax.pipeline.static_shape_tuning_pipeline with cpu_weight_prepack=True).
    return [relax.transform.AttachAttrLayoutFreeBuffers(), default_schedule_pass(target),
            relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),
            VectorErf(), VectorExp()]


def lowering_passes(target: tvm.target.Target) -> list:
    """TVM's own dataflow lowering and finalisation for the target (no fusion in it)."""
    if "dsa" in target.keys:
        from .target_dsa import pipeline as dsa

        return dsa.lowering_passes(target)
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    return cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)


def fusion_pipeline(name: str, target: tvm.target.Target | None = None) -> tvm.transform.Pass:
    """Pre-processing + fusion + FuseTIR only: the fused Relax module, before any scheduling."""
    strategy = get_strategy(name)
    target = _resolve_target(target)
    extra = strategy.extra_preprocess(target) if strategy.extra_preprocess else []
    high = strategy.high_level_preprocess(target) if strategy.high_level_preprocess else []
    if "dsa" not in target.keys:
        # CPU graph simplification shared by every strategy (the DSA's simulated figures are
        # measured on the unfolded graph)
        high = [FoldBatchNormIntoConv(), *high]
    return tvm.transform.Sequential(
        [_phase("preprocess", [*preprocess_passes(high), *extra]),
         _phase("fusion", strategy.fusion_passes(target)),
         _phase("fuse_tir", [relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
                             s_tir.transform.StmtSimplify()])],
        name=f"tvm_fusion_ext.fusion.{name}",
    )


def pipeline(name: str, target: tvm.target.Target | str | None = None,
             policy: str = DEFAULT_POLICY) -> tvm.transform.Pass:
    """The complete Relax pipeline for strategy ``name``, ready for ``tvm.compile``."""
    get_strategy(name)  # fail early with a clear message
    given = target

    @tvm.transform.module_pass(opt_level=0, name=f"tvm_fusion_ext.{name}")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        # Without an explicit target, resolve it when the pass runs: tvm.compile looks a named
        # pipeline up before entering ``with target`` and runs it inside.
        target = _resolve_target(given)
        with target:
            passes = tvm.transform.Sequential(
                [fusion_pipeline(name, target), _phase("schedule", schedule_passes(target, policy)),
                 _phase("lowering", lowering_passes(target))]
            )
            # Invariants after every pass when TVM_FUSION_EXT_CHECK=1 (tvm_fusion_ext.instrument).
            return run_checked(passes, mod)

    return _pipeline


def _phase(phase: str, passes: list) -> tvm.transform.Pass:
    """One of :data:`PHASES` as a named ``Sequential`` (instruments such as ``--dump-ir`` see its end)."""
    return tvm.transform.Sequential(passes, name=PHASE_PREFIX + phase)


def _resolve_target(target) -> tvm.target.Target:
    if target is None:
        target = tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    return tvm.target.Target(target) if isinstance(target, (str, dict)) else target


@register_fusion("none", "no fusion: every primitive op is its own kernel")
def _no_fusion(target):
    return []


@register_fusion("stock", "TVM's own FuseOps (post-dominator fusion), as in static_shape_tuning_pipeline")
def _stock_fusion(target):
    return [relax.transform.FuseOps()]

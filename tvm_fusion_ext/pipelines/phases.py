"""The complete Relax pipelines built around the fusion strategies, phase by phase.

Every strategy shares the same pre-processing (what ``relax.pipeline.static_shape_tuning_pipeline``
runs before fusion) and the same lowering after fusion, so the fusion step is the only difference
between two strategies compiled under the same scheduling policy::

    pre-processing   DecomposeOpsForInference, CanonicalizeBindings, LegalizeOps,
                     AnnotateTIROpPattern, FoldConstant
    fusion           the strategy's passes (stock: FuseOps), then FuseTIR and StmtSimplify
                     (index expressions simplified with the block domains: the reshapes FuseTIR
                     copies in keep ``(i // 768 + j) % 128``-style indices that block loop fusion)
    (graph)          the target backend's graph simplifications on high-level Relax, before
                     the strategy's own (CPU, CUDA: batch norms folded into conv weights)
    scheduling       the policy: "unscheduled" | "untuned" | "tuned", as the target's backend
                     schedules it (:mod:`tvm_fusion_ext.backends`)
    lowering         the target's backend: TVM's dataflow-lowering and finalize passes

Strategies are looked up by name in :mod:`.registry`; each one is reachable as
``tvm_fusion_ext.pipeline(name, target)`` and as ``relax_pipeline="tvm_fusion_ext.<name>"``.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir

from ..backends import POLICIES, backend_for
from .instrument import run_checked
from .registry import get_strategy

# The phases of every pipeline, in order; each runs as a Sequential named PHASE_PREFIX + phase.
PHASES = ("preprocess", "fusion", "fuse_tir", "schedule", "lowering")
PHASE_PREFIX = "tvm_fusion_ext.phase."
DEFAULT_POLICY = "untuned"


def preprocess_passes(high_level: list | None = None, graph: list | None = None) -> list:
    """Pre-processing shared by every strategy (TVM's own pre-tuning recipe, before FuseOps):
    the target backend's ``graph`` passes first (on the model's own ops, e.g. ``batch_norm``
    before it is decomposed), a strategy's ``high_level`` passes just before ``LegalizeOps``."""
    return [
        *(graph or []),
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        *(high_level or []),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]


def schedule_passes(target: tvm.target.Target, policy: str) -> list:
    """TIR scheduling for one policy, by the target's backend; applied identically to every strategy."""
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
    return backend_for(target).schedule_passes(target, policy)


def lowering_passes(target: tvm.target.Target) -> list:
    """The target backend's dataflow lowering and finalisation (no fusion in it)."""
    return backend_for(target).lowering_passes(target)


def fusion_pipeline(name: str, target: tvm.target.Target | None = None,
                    cost_check: bool = True) -> tvm.transform.Pass:
    """Pre-processing + fusion + FuseTIR only: the fused Relax module, before any scheduling.

    ``cost_check``: the strategy's fusion decisions consult the profitability check
    (:mod:`tvm_fusion_ext.cost`, CPU targets); ``False`` gives the paper's decisions as written."""
    strategy = get_strategy(name)
    target = _resolve_target(target)
    extra = strategy.extra_preprocess(target) if strategy.extra_preprocess else []
    high = strategy.high_level_preprocess(target) if strategy.high_level_preprocess else []
    return tvm.transform.Sequential(
        [_phase("preprocess", [*preprocess_passes(high, backend_for(target).graph_passes(target)),
                               *extra]),
         _phase("fusion", strategy.passes(target, cost_check)),
         _phase("fuse_tir", [relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
                             s_tir.transform.StmtSimplify()])],
        name=f"tvm_fusion_ext.fusion.{name}",
    )


def pipeline(name: str, target: tvm.target.Target | str | None = None,
             policy: str = DEFAULT_POLICY, cost_check: bool = True) -> tvm.transform.Pass:
    """The complete Relax pipeline for strategy ``name``, ready for ``tvm.compile``
    (``cost_check`` as for :func:`fusion_pipeline`)."""
    get_strategy(name)  # fail early with a clear message
    given = target

    @tvm.transform.module_pass(opt_level=0, name=f"tvm_fusion_ext.{name}")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        # Without an explicit target, resolve it when the pass runs: tvm.compile looks a named
        # pipeline up before entering ``with target`` and runs it inside.
        target = _resolve_target(given)
        with target:
            passes = tvm.transform.Sequential(
                [fusion_pipeline(name, target, cost_check),
                 _phase("schedule", schedule_passes(target, policy)),
                 _phase("lowering", lowering_passes(target))]
            )
            # Invariants after every pass when TVM_FUSION_EXT_CHECK=1 (.instrument).
            return run_checked(passes, mod)

    return _pipeline


def _phase(phase: str, passes: list) -> tvm.transform.Pass:
    """One of :data:`PHASES` as a named ``Sequential`` (instruments such as ``--dump-ir`` see its end)."""
    return tvm.transform.Sequential(passes, name=PHASE_PREFIX + phase)


def _resolve_target(target) -> tvm.target.Target:
    if target is None:
        target = tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    return tvm.target.Target(target) if isinstance(target, (str, dict)) else target

"""Fusion strategies as named TVM pipelines.

:func:`register_fusion` adds a strategy to :mod:`.registry` and registers its complete pipeline
(:func:`.phases.pipeline`) under ``tvm_fusion_ext.<name>`` in TVM's pipeline map, so
``tvm.compile(mod, target, relax_pipeline="tvm_fusion_ext.<name>")`` works. Re-registering a name
replaces it (importing or reloading the package twice never raises).
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax

from ..registration import PREFIX
from .phases import pipeline
from .registry import FusionPasses, FusionStrategy, add_strategy


def register_fusion(name: str, description: str, extra_preprocess: FusionPasses | None = None,
                    high_level_preprocess: FusionPasses | None = None, cost_checked: bool = False):
    """Decorator registering ``fn(target) -> [Pass, ...]`` as the fusion step of strategy ``name``.

    ``extra_preprocess`` runs after the shared pre-processing (on legalized ``call_tir``s);
    ``high_level_preprocess`` runs on high-level Relax ops, just before ``LegalizeOps``. With
    ``cost_checked`` the function is ``fn(target, cost_check: bool)``: whether its decisions
    consult the profitability check of :mod:`tvm_fusion_ext.cost` (the pipelines' ``cost_check``).
    """

    def _register(fn: FusionPasses) -> FusionPasses:
        add_strategy(FusionStrategy(name, description, fn, extra_preprocess, high_level_preprocess,
                                    cost_checked))
        register_relax_pipeline(name, lambda: pipeline(name))
        return fn

    return _register


def register_relax_pipeline(name: str, factory: Callable[[], tvm.transform.Pass]) -> str:
    """Register ``factory`` (called with no arguments, under ``with target``) as a Relax pipeline.

    Returns the full registered name ``tvm_fusion_ext.<name>``. Re-registration replaces the
    previous entry instead of raising, so reloading the package is safe.
    """
    full = f"{PREFIX}.{name}"
    pipeline_map = relax.pipeline.PIPELINE_MAP
    if full in pipeline_map:
        pipeline_map[full] = factory
    else:
        relax.register_pipeline(full)(factory)
    return full

"""Fusion strategies and the complete Relax pipelines built around them.

* :mod:`.registry` - the strategies by name (:func:`fusion_names`, :func:`get_strategy`);
* :mod:`.registration` - :func:`register_fusion`, which also makes a strategy the TVM pipeline
  ``tvm_fusion_ext.<name>``;
* :mod:`.phases` - the phases every pipeline runs (:data:`PHASES`): :func:`preprocess_passes`, the
  strategy's fusion, :func:`schedule_passes` and :func:`lowering_passes` (by the target's backend,
  :mod:`tvm_fusion_ext.backends`), assembled by :func:`fusion_pipeline` and :func:`pipeline`;
* :mod:`.instrument` - the invariants checked after every pass when ``TVM_FUSION_EXT_CHECK=1``;
* :mod:`.strategies` - every strategy of the package, registered on import.
"""

from ..backends import POLICIES
from . import strategies  # noqa: F401  (registers every strategy)
from .phases import (
    DEFAULT_POLICY,
    PHASE_PREFIX,
    PHASES,
    fusion_pipeline,
    lowering_passes,
    pipeline,
    preprocess_passes,
    schedule_passes,
)
from .registration import register_fusion, register_relax_pipeline
from .registry import FusionStrategy, fusion_names, get_strategy

__all__ = ["DEFAULT_POLICY", "PHASES", "PHASE_PREFIX", "POLICIES", "FusionStrategy", "fusion_names",
           "fusion_pipeline", "get_strategy", "lowering_passes", "pipeline", "preprocess_passes",
           "register_fusion", "register_relax_pipeline", "schedule_passes"]

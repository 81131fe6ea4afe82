"""The CPU backend (target key ``"cpu"``: ``llvm`` and ``c`` targets).

Scheduling: ``unscheduled`` adds nothing; ``untuned`` is the default schedule
(:mod:`tvm_fusion_ext.tir_passes.default_schedule`) followed by
:class:`~tvm_fusion_ext.tir_passes.vector_erf.VectorErf` (float32 erf as a vectorisable
polynomial); ``tuned`` first applies the MetaSchedule records of the database in scope
(``ms.database``) and gives whatever the database lacks the untuned schedule. Lowering is TVM's
own, from ``python/tvm/relax/backend/cpu_generic/pipeline.py``.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from ..tir_passes.default_schedule import default_schedule_pass
from ..tir_passes.vector_erf import VectorErf
from .registry import register_backend


@register_backend("cpu")
class CPUBackend:
    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        if policy == "unscheduled":
            return []
        untuned = [default_schedule_pass(target), VectorErf()]
        if policy == "tuned":
            return [relax.transform.MetaScheduleApplyDatabase(enable_warning=False), *untuned]
        return untuned

    def lowering_passes(self, target: tvm.target.Target) -> list:
        return cpu_generic.dataflow_lower_passes(target) + cpu_generic.finalize_passes(target)

"""Per-target pass lists for a DSA (the shape of TVM's ``relax/backend/<target>/pipeline.py``).

``tvm_fusion_ext.pipelines`` calls these for targets whose keys hold ``"dsa"``:

* :func:`schedule_passes` - MetaSchedule records (``tuned``), then the DSA staging schedule
  (:class:`.schedule.DSASchedule`: LB/GB scopes, DMA, tiles bound to cores, matrix unit), then
  :class:`AnnotateKernelModel`, which stores each kernel's model for the simulator;
* :func:`lowering_passes` - the relax VM runs on the host, so TVM's CPU dataflow lowering and
  finalisation are used unchanged; the kernels go through ``target.build.c`` (:mod:`.codegen`).
"""

from __future__ import annotations

import json

import tvm
from tvm import relax, tirx

from ..registration import register_pass
from .kernel_model import kernel_model
from .schedule import DSASchedule
from .target import spec_of_target

MODEL_ATTR = "dsa.kernel_model"


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.AnnotateKernelModel")
class AnnotateKernelModel:
    """Attach ``dsa.kernel_model`` (JSON of :func:`.kernel_model.kernel_model`) to every PrimFunc."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                model = kernel_model(func, gvar.name_hint)
                updates[gvar] = func.with_attr(MODEL_ATTR, json.dumps(model, sort_keys=True))
        mod = mod.clone() if updates else mod  # never modify the caller's module in place
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod


def schedule_passes(target: tvm.target.Target, policy: str) -> list:
    """TIR scheduling of one policy on the DSA (``unscheduled`` kernels run straight from DDR)."""
    spec = spec_of_target(target)
    if policy == "unscheduled":
        return [AnnotateKernelModel()]
    passes = [DSASchedule(spec), AnnotateKernelModel()]
    if policy == "tuned":
        if spec.matrix_shape is not None:
            # Tuned traces replay ``tensorize`` by intrinsic name: register it before replay.
            from .intrinsics import register_matrix_intrin

            register_matrix_intrin(tuple(spec.matrix_shape))
        passes.insert(0, relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
    return passes


def lowering_passes(target: tvm.target.Target) -> list:
    """The host's relax VM lowering (TVM's CPU passes); kernels are built by ``target.build.c``."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    return cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)

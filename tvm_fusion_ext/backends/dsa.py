"""The DSA backend (target key ``"dsa"``: the ``dsa/<name>`` tags of :mod:`tvm_fusion_ext.target_dsa`).

Graph: batch norms after convs folded into the conv weights
(:class:`~tvm_fusion_ext.relax_passes.fold_batch_norm.FoldBatchNormIntoConv`, as on CPUs and GPUs),
for every strategy: the simulated vector unit would otherwise spend four operations per element
on each batch norm that an inference compiler removes (TVM's Relay ``SimplifyInference`` and
``FoldScaleAxis`` did the same); and a ``take`` of an integer tensor at one constant index
(an index column ``x[:, i]``) made a slice
(:class:`~tvm_fusion_ext.relax_passes.take_as_slice.TakeAtConstantAsSlice`): the kernel generator
stages a slice's tile in LB, where it reads a gather's operands in place, one index load per
element.
Scheduling: MetaSchedule records (``tuned``), then the DSA staging schedule
(:class:`~tvm_fusion_ext.target_dsa.schedule.DSASchedule`: LB/GB scopes, DMA, tiles bound to cores,
matrix unit), :class:`~tvm_fusion_ext.target_dsa.pipeline.SeparateWideBuffers` (LB/GB buffers of
elements wider than 32 bits get a scope of their own width), then
:class:`~tvm_fusion_ext.target_dsa.pipeline.AnnotateKernelModel`, which stores each kernel's model
for the simulator; ``unscheduled`` kernels run straight from DDR. Lowering: the relax VM runs on
the host, so TVM's CPU dataflow lowering and finalisation are used unchanged; the kernels go
through ``target.build.c`` (:mod:`tvm_fusion_ext.target_dsa.codegen`).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from ..relax_passes.fold_batch_norm import FoldBatchNormIntoConv
from ..relax_passes.take_as_slice import TakeAtConstantAsSlice
from ..target_dsa.pipeline import AnnotateKernelModel, SeparateWideBuffers
from ..target_dsa.schedule import DSASchedule
from ..target_dsa.target import spec_of_target
from .registry import register_backend


@register_backend("dsa")
class DSABackend:
    def graph_passes(self, target: tvm.target.Target) -> list:
        """Batch norms after convs folded into the conv weights, takes of integer tensors at a
        constant index made slices (module docstring)."""
        return [FoldBatchNormIntoConv(), TakeAtConstantAsSlice()]

    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        spec = spec_of_target(target)
        if policy == "unscheduled":
            return [AnnotateKernelModel()]
        passes = [DSASchedule(spec), SeparateWideBuffers(), AnnotateKernelModel()]
        if policy == "tuned":
            if spec.matrix_shape is not None:
                # Tuned traces replay ``tensorize`` by intrinsic name: register it before replay.
                from ..target_dsa.intrinsics import register_matrix_intrin

                register_matrix_intrin(tuple(spec.matrix_shape))
            passes.insert(0, relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
        return passes

    def lowering_passes(self, target: tvm.target.Target) -> list:
        """The host's relax VM lowering (TVM's CPU passes); kernels are built by ``target.build.c``."""
        return cpu_generic.dataflow_lower_passes(target) + cpu_generic.finalize_passes(target)

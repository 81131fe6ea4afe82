"""The CUDA backend (target key ``"cuda"``: ``{"kind": "cuda", "arch": "sm_90"}`` targets, whose keys
are ``["cuda", "gpu"]``), after TVM's ``python/tvm/relax/backend/cuda/pipeline.py``.

Graph: batch norms after convs folded into the conv weights
(:class:`~tvm_fusion_ext.relax_passes.fold_batch_norm.FoldBatchNormIntoConv`), then TVM's library
dispatch for CUDA (sampling, sort and scan ops become TVM's GPU kernels before legalisation).
Scheduling: ``untuned`` is :class:`~tvm_fusion_ext.tir_passes.unit_iters.DropUnitIters` (dlight
declines the constant unit bindings the pipelines' simplification leaves), then
:class:`~tvm_fusion_ext.tir_passes.flash_attention.FlashAttention` (a kernel that is exactly
attention, as NeoFlow groups BERT's, becomes one FlashAttention kernel), then dlight's GPU rule
chain as TVM's default CUDA pipeline applies it
(:func:`~tvm_fusion_ext.tir_passes.gpu_rules.cuda_schedule_rules`: ``Matmul``, ``GEMV``,
``Reduction``, ``GeneralReduction``, each declining the kernel forms it gets wrong or schedules
badly, then ``Fallback``: every kernel gets thread bindings, and ``GeneralReduction``
keeps a reduction and the element-wise ops after it in one kernel with a cross-thread reduction in
shared memory), with APOLLO's stitching on top: memory stitching (section 4.2,
:class:`~tvm_fusion_ext.tir_passes.gpu_row_stitch.SharedRowReduction` before ``GeneralReduction``:
the row's re-read inputs in shared memory) and, after the rules, parallelism stitching
(section 4.3, :class:`~tvm_fusion_ext.tir_passes.gpu_parallel_stitch.GPUParallelStitch`: a
kernel's independent loop nests in one launch); ``tuned`` first applies the MetaSchedule
records of the database in scope and gives whatever the database lacks the untuned schedule. ``unscheduled`` is refused with a
``ValueError``: TVM compiles a kernel without thread bindings into host code, which would read
the GPU's buffers from the CPU, so there is no unscheduled GPU baseline to compare with. Lowering is TVM's own CUDA dataflow lowering
and finalisation (static memory planning, CUDA-graph rewriting when
``relax.backend.use_cuda_graph`` is set).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cuda import pipeline as cuda_pipeline
from tvm.s_tir import dlight as dl

from ..relax_passes.fold_batch_norm import FoldBatchNormIntoConv
from ..tir_passes.gpu_parallel_stitch import GPUParallelStitch
from ..tir_passes.gpu_rules import cuda_schedule_rules
from ..tir_passes.unit_iters import DropUnitIters
from .registry import register_backend


@register_backend("cuda")
class CUDABackend:
    def graph_passes(self, target: tvm.target.Target) -> list:
        return [FoldBatchNormIntoConv(), *cuda_pipeline.library_dispatch_passes(target)]

    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        if policy == "unscheduled":
            raise ValueError(f"scheduling policy 'unscheduled' on target {target.kind.name} "
                             f"({target.attrs.get('arch', 'no arch')}): GPU kernels need thread "
                             "bindings to build; use 'untuned' or 'tuned'")
        untuned = [DropUnitIters(), dl.ApplyDefaultSchedule(*cuda_schedule_rules()), GPUParallelStitch()]
        if policy == "tuned":
            return [relax.transform.MetaScheduleApplyDatabase(enable_warning=False), *untuned]
        return untuned

    def lowering_passes(self, target: tvm.target.Target) -> list:
        return cuda_pipeline.dataflow_lower_passes(target) + cuda_pipeline.finalize_passes(target)

"""The CUDA backend (target key ``"cuda"``: ``{"kind": "cuda", "arch": "sm_90"}`` targets, whose keys
are ``["cuda", "gpu"]``), after TVM's ``python/tvm/relax/backend/cuda/pipeline.py``.

Graph: batch norms after convs folded into the conv weights
(:class:`~tvm_fusion_ext.relax_passes.fold_batch_norm.FoldBatchNormIntoConv`), then TVM's library
dispatch for CUDA (sampling, sort and scan ops become TVM's GPU kernels before legalisation).
Scheduling: ``untuned`` is :class:`~tvm_fusion_ext.tir_passes.unit_iters.DropUnitIters` (dlight
declines the constant unit bindings the pipelines' simplification leaves), then
:class:`~tvm_fusion_ext.tir_passes.flash_attention.FlashAttention` (a kernel that is exactly
attention, as NeoFlow groups BERT's, becomes one FlashAttention kernel), then dlight's GPU rule
chain as TVM's default CUDA pipeline applies it (``Matmul`` (see :class:`MatmulGuard`), ``GEMV`` (see
:class:`DeclineOnAssertion`), ``Reduction``,
``GeneralReduction``, ``Fallback``: every kernel gets thread bindings, and ``GeneralReduction``
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
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.backend.cuda import pipeline as cuda_pipeline
from tvm.s_tir import dlight as dl
from tvm.s_tir.stmt import SBlock

from ..relax_passes.fold_batch_norm import FoldBatchNormIntoConv
from ..tir_passes.flash_attention import FlashAttention
from ..tir_passes.gpu_parallel_stitch import GPUParallelStitch
from ..tir_passes.gpu_row_stitch import SharedRowReduction
from ..tir_passes.unit_iters import DropUnitIters
from .registry import register_backend


class DeclineOnAssertion(dl.ScheduleRule):
    """``rule``, declining (``None``) where it fails an assertion instead of scheduling.

    dlight's rules decline by returning ``None`` (``python/tvm/s_tir/dlight/base/transform.py``
    then tries the next rule), but some assert on kernels fusion creates instead:

    * ``GEMV``, in ``normalize`` (``python/tvm/s_tir/dlight/analysis/gemv.py``): a row sum whose
      every spatial iterator indexes every buffer (``sum(exp(x - max))`` with the row maximum as
      an input, which APOLLO's ``apollo-no-stitch`` leaves as a kernel of its own);
    * ``Reduction``, in ``detect_dominant_read`` (``dlight/analysis/common_analysis.py``): a
      reduction reading a region wider than one element per iterator (the conformer's depthwise
      conv under ``dominator-both``);
    * ``Matmul``, in ``auto_inline_consumer_chain`` (``dlight/gpu/matmul.py``): a matmul whose
      consumers cannot all be inlined into its write-back (GraphTurbo's groups on ViT and the
      capsule conv).

    A rule's schedule is its own copy of the function, so a failed attempt leaves nothing behind;
    the next rule of the chain schedules the kernel.
    """

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func, target, tunable):
        try:
            return self.rule.apply(func, target, tunable)
        except AssertionError:
            return None


class MatmulGuard(dl.ScheduleRule):
    """dlight's ``Matmul`` (``python/tvm/s_tir/dlight/gpu/matmul.py``) on the kernels it schedules
    correctly; others are declined (``None``) and ``Fallback`` schedules them:

    * kernels that write several parameters: ``Matmul`` stages one output through its epilogue,
      and on a kernel with several outputs (a QKV projection whose three slices are outputs, as
      NeoFlow groups BERT's attention input) its schedule fails lowering ("Buffer
      matmul_intermediate_reindex_pad is used before its definition");
    * kernels whose epilogue reads the matmul's result at computed indices (a reshape flattening
      its rows, ``out[b, i * N + j] = mm[b, i, j]``) while the result's last two extents are not
      multiples of :data:`MATMUL_TILE`: ``Matmul`` pads those axes to its tile and guards the
      write-back with the epilogue's bound only (``i * N + j < M * N``), so the padded columns
      overwrite the next row (DLRM's interaction under APOLLO, measured wrong on an H100).
    """

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func, target, tunable):
        if isinstance(func, tirx.PrimFunc) and (len(written_params(func)) > 1 or remapped_padded_result(func)):
            return None
        return self.rule.apply(func, target, tunable)


# A multiple of every tile dlight's Matmul pads a matmul's row and column axes to (its CUDA
# configurations in python/tvm/s_tir/dlight/gpu/matmul.py tile rows and columns by at most 64).
MATMUL_TILE = 64


def remapped_padded_result(func: tirx.PrimFunc) -> bool:
    """Whether a block after a reduction whose result's last two extents are not multiples of
    :data:`MATMUL_TILE` reads or writes at computed indices (anything but iterators and constants):
    an epilogue that changes the result's layout."""
    blocks = []
    tvm_ffi.structural_walk(func.body, [(SBlock, blocks.append)], order="pre")
    padded = [i for i, block in enumerate(blocks)
              if any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars)
              and any(not isinstance(d, tirx.IntImm) or int(d) % MATMUL_TILE
                      for region in block.writes for d in list(region.source.shape)[-2:])]
    return bool(padded) and any(not isinstance(index.min, (tirx.Var, tirx.IntImm))
                                for block in blocks[padded[0] + 1:]
                                for region in [*block.reads, *block.writes] for index in region.region)


def written_params(func: tirx.PrimFunc) -> list:
    """The buffer parameters of ``func`` that some block writes."""
    written = []
    tvm_ffi.structural_walk(func.body, [(SBlock, lambda block: written.extend(
        region.source for region in block.writes))], order="pre")
    return [param for param in func.params if any(buf.same_as(param) for buf in written)]


@register_backend("cuda")
class CUDABackend:
    def graph_passes(self, target: tvm.target.Target) -> list:
        return [FoldBatchNormIntoConv(), *cuda_pipeline.library_dispatch_passes(target)]

    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        if policy == "unscheduled":
            raise ValueError(f"scheduling policy 'unscheduled' on target {target.kind.name} "
                             f"({target.attrs.get('arch', 'no arch')}): GPU kernels need thread "
                             "bindings to build; use 'untuned' or 'tuned'")
        rules = (FlashAttention(), *map(DeclineOnAssertion, (
            MatmulGuard(dl.gpu.Matmul()), dl.gpu.GEMV(), dl.gpu.Reduction(), SharedRowReduction(),
            dl.gpu.GeneralReduction())), dl.gpu.Fallback())
        untuned = [DropUnitIters(), dl.ApplyDefaultSchedule(*rules), GPUParallelStitch()]
        if policy == "tuned":
            return [relax.transform.MetaScheduleApplyDatabase(enable_warning=False), *untuned]
        return untuned

    def lowering_passes(self, target: tvm.target.Target) -> list:
        return cuda_pipeline.dataflow_lower_passes(target) + cuda_pipeline.finalize_passes(target)

"""The CUDA backend's schedule rule chain (:func:`cuda_schedule_rules`) and the wrappers that make
dlight's rules decline where they would fail or schedule wrongly.

The chain follows TVM's default CUDA pipeline (``python/tvm/relax/backend/cuda/pipeline.py``):
:class:`~.flash_attention.FlashAttention` first (a kernel that is exactly attention), then dlight's
``Matmul`` (behind :class:`MatmulGuard`), ``GEMV``, ``Reduction``,
:class:`~.gpu_row_stitch.SharedRowReduction` (APOLLO's memory stitching, section 4.2) and
``GeneralReduction``, each behind :class:`DeclineOnAssertion`, and ``Fallback`` last. dlight's
``ApplyDefaultSchedule`` (``python/tvm/s_tir/dlight/base/transform.py``) gives a kernel the schedule
of the first rule whose ``apply`` returns one. The backend (``backends/cuda.py``) schedules with
this chain and the GPU profitability check (``cost/gpu_model.py``) predicts from it.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.stmt import SBlock

from .flash_attention import FlashAttention
from .gpu_row_stitch import SharedRowReduction

# A multiple of every tile dlight's Matmul pads a matmul's row and column axes to (its CUDA
# configurations in python/tvm/s_tir/dlight/gpu/matmul.py tile rows and columns by at most 64).
MATMUL_TILE = 64


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


def cuda_schedule_rules() -> tuple[dl.ScheduleRule, ...]:
    """The rules, in the order ``ApplyDefaultSchedule`` tries them (module docstring)."""
    return (FlashAttention(), *map(DeclineOnAssertion, (
        MatmulGuard(dl.gpu.Matmul()), dl.gpu.GEMV(), dl.gpu.Reduction(), SharedRowReduction(),
        dl.gpu.GeneralReduction())), dl.gpu.Fallback())


def innermost_rule(rule: dl.ScheduleRule) -> dl.ScheduleRule:
    """The rule a wrapper (:class:`DeclineOnAssertion`, :class:`MatmulGuard`) applies."""
    while isinstance(rule, (DeclineOnAssertion, MatmulGuard)):
        rule = rule.rule
    return rule


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

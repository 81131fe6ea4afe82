"""The CUDA backend's schedule rule chain (:func:`cuda_schedule_rules`) and the wrappers that make
dlight's rules decline where they would fail or schedule wrongly.

The chain follows TVM's default CUDA pipeline (``python/tvm/relax/backend/cuda/pipeline.py``):
:class:`~.flash_attention.FlashAttention` first (a kernel that is exactly attention), then dlight's
``Matmul``, ``GEMV``, ``Reduction``, :class:`~.gpu_row_stitch.SharedRowReduction` (APOLLO's memory
stitching, section 4.2) and ``GeneralReduction``, each behind :class:`DeclineOnAssertion` and
:class:`DeclineWhere` with the kernel forms it gets wrong or schedules badly
(:func:`writes_several_params`, :func:`remapped_padded_result`, :func:`reads_reduction_partially`,
:func:`reduces_less_than_a_warp`, :func:`chains_contractions`), and ``Fallback`` last. dlight's
``ApplyDefaultSchedule`` (``python/tvm/s_tir/dlight/base/transform.py``) gives a kernel the schedule
of the first rule whose ``apply`` returns one. The backend (``backends/cuda.py``) schedules with
this chain and the GPU profitability check (``cost/gpu_model.py``) predicts from it.
"""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl

from .analysis import analyze_blocks, is_reduction, sblocks
from .flash_attention import FlashAttention
from .gpu_row_stitch import SharedRowReduction

# A multiple of every tile dlight's Matmul pads a matmul's row and column axes to (its CUDA
# configurations in python/tvm/s_tir/dlight/gpu/matmul.py tile rows and columns by at most 64).
MATMUL_TILE = 64
# Threads of a warp: the fewest elements a reduction must sum per output for dlight's
# cross-thread reduction rules to occupy them (CUDA C++ Programming Guide, "SIMT Architecture").
WARP = 32


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


class DeclineWhere(dl.ScheduleRule):
    """``rule``, declining (``None``) the kernels of which one of ``conditions`` holds; each
    condition is a kernel form ``rule`` schedules wrongly or badly, and the next rule of the
    chain schedules such a kernel instead."""

    def __init__(self, rule: dl.ScheduleRule, *conditions):
        self.rule, self.conditions = rule, conditions

    def apply(self, func, target, tunable):
        if isinstance(func, tirx.PrimFunc) and any(condition(func) for condition in self.conditions):
            return None
        return self.rule.apply(func, target, tunable)


def cuda_schedule_rules() -> tuple[dl.ScheduleRule, ...]:
    """The rules, in the order ``ApplyDefaultSchedule`` tries them (module docstring)."""
    return (FlashAttention(), *map(DeclineOnAssertion, (
        DeclineWhere(dl.gpu.Matmul(), writes_several_params, remapped_padded_result, reads_reduction_partially),
        DeclineWhere(dl.gpu.GEMV(), reads_reduction_partially, reduces_less_than_a_warp),
        DeclineWhere(dl.gpu.Reduction(), reads_reduction_partially, reduces_less_than_a_warp),
        DeclineWhere(SharedRowReduction(), reduces_less_than_a_warp, chains_contractions),
        DeclineWhere(dl.gpu.GeneralReduction(), reduces_less_than_a_warp, chains_contractions))),
        dl.gpu.Fallback())


def innermost_rule(rule: dl.ScheduleRule) -> dl.ScheduleRule:
    """The rule a wrapper (:class:`DeclineOnAssertion`, :class:`DeclineWhere`) applies."""
    while isinstance(rule, (DeclineOnAssertion, DeclineWhere)):
        rule = rule.rule
    return rule


def writes_several_params(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` writes several parameters. dlight's ``Matmul`` stages one output through
    its epilogue; on a kernel with several (a QKV projection whose three slices are outputs, as
    NeoFlow groups BERT's attention input) its schedule fails lowering ("Buffer
    matmul_intermediate_reindex_pad is used before its definition")."""
    return len(written_params(func)) > 1


def remapped_padded_result(func: tirx.PrimFunc) -> bool:
    """Whether a block after a reduction whose result's last two extents are not multiples of
    :data:`MATMUL_TILE` reads or writes at computed indices (anything but iterators and constants):
    an epilogue that changes the result's layout. dlight's ``Matmul`` pads those axes to its tile
    and guards the write-back with the epilogue's bound only (``i * N + j < M * N`` for a reshape
    flattening its rows, ``out[b, i * N + j] = mm[b, i, j]``), so the padded columns overwrite
    the next row (DLRM's interaction under APOLLO, measured wrong on an H100)."""
    blocks = sblocks(func)
    padded = [i for i, block in enumerate(blocks)
              if is_reduction(block) and any(not isinstance(d, tirx.IntImm) or int(d) % MATMUL_TILE
                      for region in block.writes for d in list(region.source.shape)[-2:])]
    return bool(padded) and any(not isinstance(index.min, (tirx.Var, tirx.IntImm))
                                for block in blocks[padded[0] + 1:]
                                for region in [*block.reads, *block.writes] for index in region.region)


def written_params(func: tirx.PrimFunc) -> list:
    """The buffer parameters of ``func`` that some block writes."""
    written = [region.source for block in sblocks(func) for region in block.writes]
    return [param for param in func.params if any(buf.same_as(param) for buf in written)]


def reads_reduction_partially(func: tirx.PrimFunc) -> bool:
    """Whether a block reads a value computed from a reduction (its result, or what element-wise
    blocks made of it) at indices that leave that buffer's shape somewhere in the block's domain:
    the block reads it under a condition (``T.if_then_else`` of a concatenation or a pad) and
    takes its other points from elsewhere.

    dlight's ``Matmul``, ``GEMV`` and ``Reduction`` inline the epilogue and compute it at the
    reduction's spatial loops (``reverse_compute_at``), which gives it only the points where the
    reduction's result is read. DenseNet's conv -> concatenation -> batch norm -> ReLU -> mean, as
    NeoFlow and GraphTurbo group it, then had the conv's channels written and the concatenated
    earlier channels left unwritten (measured wrong on an H200; ``driver.kernel_check`` shows it
    on the host with the thread loops serial)."""
    derived = []
    for block in sblocks(func):
        derived_reads = [region for region in block.reads if any(region.source.same_as(b) for b in derived)]
        if derived_reads and any(_leaves_shape(region, block) for region in derived_reads):
            return True
        if derived_reads or is_reduction(block):
            derived.extend(region.source for region in block.writes)
    return False


def reduces_less_than_a_warp(func: tirx.PrimFunc) -> bool:
    """Whether every reduction of ``func`` sums fewer than :data:`WARP` elements per output (a
    3 x 3 depthwise conv sums 9). dlight's reduction rules spread one output's reduction over the
    threads of a block (``GeneralReduction`` binds the spatial loops to blocks and splits the
    reduction over 256 threads), which leaves all but a few threads idle and gives every output
    element a block of its own; ``Fallback`` gives each thread whole outputs. MobileNetV2 on an
    H200: unfused (its depthwise convs under ``Fallback``) 0.87 ms, FuseOps' groups (each
    depthwise conv with its bias and ReLU6 under ``GeneralReduction``) 2.44 ms."""
    sizes = [math.prod(int(iv.dom.extent) if isinstance(iv.dom.extent, tirx.IntImm) else WARP
                       for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce)
             for block in sblocks(func) if is_reduction(block)]
    return bool(sizes) and max(sizes) < WARP


def chains_contractions(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` holds two contractions or more (matmuls, convs: reductions walking every
    operand along a reduction axis, :attr:`~.analysis.BlockInfo.is_contraction`). dlight's
    ``GeneralReduction`` computes every block before the last reduction inside the last one's
    thread blocks, one per output element, so an earlier contraction is computed again for every
    output element that reads it: MobileNetV2's projection conv and the next block's expansion
    conv, as NeoFlow groups them, hold 2x to 386x the reduction operations of the unscheduled
    kernel once scheduled (test size). ``Fallback`` computes each contraction once."""
    infos = analyze_blocks(s_tir.Schedule(func))
    if infos is None:
        return False
    return sum(info.is_contraction for _, info in infos) >= 2


def _leaves_shape(region, block) -> bool:
    """Whether ``region`` of ``block`` reaches outside its buffer's shape over the block's domain."""
    analyzer = tvm.sym.Analyzer()
    for iv in block.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    for index, extent in zip(region.region, region.source.shape):
        low = analyzer.const_int_bound(index.min)
        high = analyzer.const_int_bound(index.min + index.extent - 1)
        if low.min_value < 0 or (isinstance(extent, tirx.IntImm) and high.max_value >= int(extent)):
            return True
    return False

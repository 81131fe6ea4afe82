"""Predicted run time of one kernel as the CUDA backend schedules it: which rule of the chain takes
it, and a roofline per rule class over the GPU's datasheet facts.

The CUDA backend gives a kernel the schedule of the first rule of
:func:`~tvm_fusion_ext.tir_passes.gpu_rules.cuda_schedule_rules` that returns one (after
``DropUnitIters``, as the backend runs it), then stitches its independent launches
(:func:`~tvm_fusion_ext.tir_passes.gpu_parallel_stitch.stitch_launches`). What a fused kernel is
worth depends on that rule far more than on its bytes: a matmul alone gets dlight's tiled
``Matmul``, a layer norm alone a cross-thread reduction, but two matmuls, or a matmul and the
layer norm after it, in one kernel are declined by every rule but ``Fallback``, which binds each
output element to one thread and runs that element's whole reduction serially in it. The model::

    time = launches * launch_seconds + max(bytes / dram_bandwidth, compute)
    compute = elementwise_ops / (fp32_flops * ELEMENTWISE_EFFICIENCY)
              + sum over reduction blocks of reduction_seconds(block, rule)

with, for a reduction block of ``ops`` operations over ``outputs`` elements each ``length`` steps
long, ``ops / (fp32_flops * RULE_EFFICIENCY[rule])`` for a tiled or cross-thread rule (for the
rules that give every output element a block of 256 threads, ``GeneralReduction`` and
``SharedRowReduction``, no less than the waves of those blocks take:
:func:`block_per_output_seconds`; ViT under APOLLO ran at 0.25x of ``stock`` on an H200 with
matmuls ``Matmul`` declined and ``GeneralReduction`` took), and for
``Fallback`` the serial chain: ``waves * length * SERIAL_STEP_CYCLES / clock_hz``, ``waves`` being
``ceil(outputs / (num_cores * max_threads_per_sm))`` (no faster than its throughput bound at
``ELEMENTWISE_EFFICIENCY``). ``bytes`` are the kernel's parameters and the intermediates the
schedule leaves in global memory; ``launches`` the ``__global__`` functions the scheduled kernel
becomes. Hardware facts come from :class:`~tvm_fusion_ext.hardware.GPUSpec`; nothing is measured,
so the prediction is deterministic and needs no GPU.

Calibration, and how far it goes: the efficiencies and the serial step are not fitted per kernel
(no per-kernel H100 times exist); they are orders of magnitude read off the H100 runs of
``docs/benchmarks.md`` (section "NVIDIA H100"):

* ``SERIAL_STEP_CYCLES``: APOLLO's one-kernel ``multi_head`` (64 rows of 1024, two row reductions
  under ``Fallback``, stitched side by side into one launch, 108 us a call) gives about 200
  cycles per step of a reduction. The model adds a kernel's reductions up rather than overlapping
  stitched ones, so it predicts that kernel at about twice its time: on the side of refusing;
* tiled rules (``Matmul``, FlashAttention): ``stock`` BERT-base at seq 128 runs its about 22
  GFLOP in 5.8 ms, of which 228 launches take about 1.1 ms: about 7% of the float32 peak, rounded
  to 0.08;
* cross-thread reductions and element-wise ops: no measurement separates them from their launch
  (layer-norm and softmax chains run in under 10 us a kernel), so they get values that keep them
  memory-bound at the benchmarks' sizes (0.05 and 0.25 of the peak).

The one other comparison available: ``stock``'s six ``multi_head`` kernels are predicted at 31 us,
measured at 41 us. Read the constants as orders of magnitude; the decisions need no more: a
``Fallback`` reduction of a few hundred steps per thread costs tens of microseconds where the
tiled or cross-thread kernels of its parts cost a few.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.stmt import SBlock, SBlockRealize

from ..hardware import GPUSpec, spec_for_target
from ..tir_passes.analysis import REDUCE
from ..tir_passes.flash_attention import FlashAttention
from ..tir_passes.gpu_parallel_stitch import stitch_launches
from ..tir_passes.gpu_row_stitch import SharedRowReduction
from ..tir_passes.gpu_rules import cuda_schedule_rules, innermost_rule
from ..tir_passes.unit_iters import DropUnitIters
from .features import value_ops
from .model import RememberedPredictions

SERIAL_STEP_CYCLES = 200
ELEMENTWISE_EFFICIENCY = 0.25
TILED_EFFICIENCY = 0.08
CROSS_THREAD_EFFICIENCY = 0.05
# Rules giving each output element a block of its own, and that block's threads.
BLOCK_PER_OUTPUT_RULES = (dl.gpu.GeneralReduction, SharedRowReduction)
REDUCTION_BLOCK_THREADS = 256
# Fraction of the float32 peak a reduction reaches under each rule (``Fallback``: serial, above).
RULE_EFFICIENCY = {FlashAttention: TILED_EFFICIENCY, dl.gpu.Matmul: TILED_EFFICIENCY,
                   dl.gpu.GEMV: CROSS_THREAD_EFFICIENCY, dl.gpu.Reduction: CROSS_THREAD_EFFICIENCY,
                   SharedRowReduction: CROSS_THREAD_EFFICIENCY,
                   dl.gpu.GeneralReduction: CROSS_THREAD_EFFICIENCY}


def scheduling_rule(func: tirx.PrimFunc, target: tvm.target.Target):
    """(rule, scheduled kernel) for the first rule of the CUDA chain that schedules ``func``
    (``rule`` unwrapped, see :func:`~tvm_fusion_ext.tir_passes.gpu_rules.innermost_rule`);
    ``(None, func)`` when every rule declines, or when a rule raises: the backend's
    ``ApplyDefaultSchedule`` would fail on that kernel too (a ``ScheduleError`` of dlight's
    ``GeneralReduction`` on a matmul whose result a strided slice reads, among NeoFlow's candidate
    merges on BERT), so no such kernel can be built."""
    func = DropUnitIters()(tvm.IRModule({"main": func}))["main"]
    for rule in cuda_schedule_rules():
        try:
            sch = rule.apply(func, target, False)
        except Exception:  # noqa: BLE001 - any failure of a rule: the backend cannot build it
            return None, func
        if sch is not None:
            sch = sch[0] if isinstance(sch, list) else sch
            return innermost_rule(rule), sch.mod["main"]
    return None, func


class GPUKernelModel(RememberedPredictions):
    """Predicted seconds per kernel on a ``cuda`` target (module docstring), remembered in memory
    (:class:`~.model.RememberedPredictions`)."""

    def __init__(self, target: tvm.target.Target):
        super().__init__()
        self.target = target
        self.spec = spec_for_target(target)
        if not isinstance(self.spec, GPUSpec):
            raise TypeError(f"target {target} has no GPU spec")

    def predict(self, func: tirx.PrimFunc) -> float:
        """Predicted seconds of one call of ``func`` as the CUDA backend schedules it."""
        spec = self.spec
        rule, scheduled = scheduling_rule(func, self.target)
        if rule is None:
            return math.inf  # the backend cannot schedule the kernel
        elementwise, reductions = block_work(func)
        compute = elementwise / (spec.fp32_flops * ELEMENTWISE_EFFICIENCY)
        resident = spec.num_cores * spec.max_threads_per_sm
        efficiency = RULE_EFFICIENCY.get(type(rule))
        for ops, outputs, length in reductions:
            if isinstance(rule, BLOCK_PER_OUTPUT_RULES):
                compute += max(ops / (spec.fp32_flops * efficiency), block_per_output_seconds(outputs, length, spec))
            elif efficiency is not None:
                compute += ops / (spec.fp32_flops * efficiency)
            else:
                serial = math.ceil(outputs / resident) * length * SERIAL_STEP_CYCLES / spec.clock_hz
                compute += max(serial, ops / (spec.fp32_flops * ELEMENTWISE_EFFICIENCY))
        return (launch_count(scheduled) * spec.launch_seconds
                + max(global_bytes(scheduled) / spec.dram_bandwidth, compute))


def block_per_output_seconds(outputs: int, length: float, spec: GPUSpec) -> float:
    """Seconds of a reduction under a rule that gives each output element a thread block of
    :data:`REDUCTION_BLOCK_THREADS` threads (``GeneralReduction`` fuses the spatial loops into
    ``blockIdx.x`` and splits the reduction over ``threadIdx.x``,
    ``python/tvm/s_tir/dlight/gpu/general_reduction.py``): ``outputs`` blocks run in waves of as
    many as the SMs hold, each block ``length / threads`` serial steps and a ``log2(threads)``-step
    tree across its threads. Cheap for a layer norm's hundreds of rows, far slower than a tiled
    ``Matmul`` for a matmul's hundreds of thousands of output elements."""
    resident = spec.num_cores * spec.max_threads_per_sm // REDUCTION_BLOCK_THREADS
    steps = math.ceil(length / REDUCTION_BLOCK_THREADS) + math.log2(REDUCTION_BLOCK_THREADS)
    return math.ceil(outputs / resident) * steps * SERIAL_STEP_CYCLES / spec.clock_hz


def block_work(func: tirx.PrimFunc) -> tuple[float, list[tuple[float, int, float]]]:
    """Of an unscheduled kernel: the operations of its element-wise blocks, and per reduction
    block ``(operations, output elements, steps per output element)``. Operations are counted as
    :func:`.features.value_ops` counts them, times the trips of the loops around the block."""
    elementwise = 0.0
    reductions = []

    def visit(stmt, trips):
        if isinstance(stmt, tirx.For):
            extent = stmt.extent.value if isinstance(stmt.extent, tirx.IntImm) else 1
            visit(stmt.body, trips * extent)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, trips)
        elif isinstance(stmt, SBlockRealize):
            block = stmt.block
            if not isinstance(block.body, tirx.BufferStore):
                visit(block.body, trips)
                return
            ops = trips * max(value_ops(block.body.value), 1)
            if not any(iv.iter_type == REDUCE for iv in block.iter_vars):
                nonlocal elementwise
                elementwise += ops
                return
            outputs = math.prod(int(iv.dom.extent) for iv in block.iter_vars
                                if iv.iter_type != REDUCE and isinstance(iv.dom.extent, tirx.IntImm))
            reductions.append((ops, outputs, trips / max(outputs, 1)))
        elif isinstance(stmt, (tirx.LetStmt, tirx.AttrStmt, tirx.DeclBuffer)):
            visit(stmt.body, trips)
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, trips)

    body = func.body.block.body if isinstance(func.body, SBlockRealize) else func.body
    visit(body, 1)
    return elementwise, reductions


def global_bytes(func: tirx.PrimFunc) -> int:
    """Bytes of the kernel's parameters and of the buffers it allocates in global memory, each
    counted once."""
    buffers = [p for p in func.params if isinstance(p, tirx.Buffer)]
    tvm_ffi.structural_walk(func.body, [(SBlock, lambda block: buffers.extend(
        b for b in block.alloc_buffers if b.scope() == "global"))], order="pre")
    return sum(math.prod(int(d) for d in b.shape if isinstance(d, tirx.IntImm))
               * tvm.runtime.DataType(str(b.dtype)).bits // 8 for b in buffers)


def launch_count(func: tirx.PrimFunc) -> int:
    """``__global__`` functions the scheduled kernel becomes after parallelism stitching: one per
    top-level loop nest of its root block (at least one)."""
    func = stitch_launches(func)
    body = func.body.block.body if isinstance(func.body, SBlockRealize) else func.body
    stmts = body.seq if isinstance(body, tirx.SeqStmt) else [body]
    return max(1, sum(isinstance(s, tirx.For) for s in stmts))


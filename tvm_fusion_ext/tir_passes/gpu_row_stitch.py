"""``SharedRowReduction``: APOLLO's memory stitching (section 4.2, Algorithm 2) of a row reduction
and its followers on CUDA, the row in shared memory.

dlight's ``GeneralReduction`` (``python/tvm/s_tir/dlight/gpu/general_reduction.py``) already keeps
a layer norm or softmax in one kernel: one thread block per row, each reduction a cross-thread
reduction whose result stays in shared memory, the element-wise ops after it in the same block.
But every pass over the row (the mean, the variance, the normalisation; the max, the exp-sum, the
division) reads the row's inputs from global memory again. This rule schedules the kernel with
``GeneralReduction`` and then stitches the passes through shared memory: every input parameter that
two or more blocks of the row read is cached (``cache_read`` into ``"shared"``, ``compute_at``
under the row's ``blockIdx.x`` loop), loaded once by the block's threads together
(``threadIdx.x``-bound), and every pass reads the cache; TVM's ``ThreadSync`` puts the
``__syncthreads()`` between the load and the passes. That is Algorithm 2's line 8: the tensors
between the stitched micro-graphs go to the fast memory when they fit.

The caches must fit the statically declared shared memory of one block
(:attr:`~tvm_fusion_ext.hardware.spec.GPUSpec.static_shared_memory_per_block`) beside what the
schedule already keeps there (its reduction results, and a staging word per warp for each
cross-thread reduction, ``src/tirx/transforms/lower_thread_allreduce.cc``). The rule declines
(``None``, so ``GeneralReduction`` itself schedules the kernel next) where ``GeneralReduction``
declines, where no input is read twice, where a row is not of static size, where the caches do not
fit, or where a schedule step fails.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.schedule import ScheduleError
from tvm.s_tir.stmt import SBlockRealize

from ..hardware import GPUSpec, spec_for_target

SHARED = "shared"


class SharedRowReduction(dl.ScheduleRule):
    """dlight's ``GeneralReduction`` with the re-read row inputs cached in shared memory (module
    docstring)."""

    def __init__(self):
        self.rule = dl.gpu.GeneralReduction()

    def apply(self, func, target, tunable):
        spec = spec_for_target(target)
        if not isinstance(func, tirx.PrimFunc) or not isinstance(spec, GPUSpec):
            return None
        sch = self.rule.apply(func, target, tunable)
        if not isinstance(sch, s_tir.Schedule):
            return None
        try:
            return cache_rows(sch, spec)
        except ScheduleError:
            return None


def cache_rows(sch: s_tir.Schedule, spec: GPUSpec) -> s_tir.Schedule | None:
    """``sch`` (a ``GeneralReduction`` schedule) with its re-read inputs in shared memory, or None."""
    func = sch.mod["main"]
    row_loop = only_row_loop(func)
    if row_loop is None:
        return None
    realizes = []
    tvm_ffi.structural_walk(row_loop.body, [(SBlockRealize, realizes.append)], order="pre")
    blocks = [realize.block for realize in realizes]
    threads = thread_extent(row_loop)
    if threads is None or len({block.name_hint for block in blocks}) != len(blocks):
        return None
    reread = [param for param in func.params
              if sum(any(r.source.same_as(param) for r in block.reads) for block in blocks) >= 2]
    if not reread:
        return None
    reductions = sum(any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars) for block in blocks)
    allocated = shared_bytes(func)
    if allocated is None:
        return None
    budget = (spec.static_shared_memory_per_block - allocated
              - reductions * (threads // spec.warp_size + 1) * 8)
    row_rv = sch.get_loops(sch.get_sblock(blocks[0].name_hint))[0]
    cached = 0
    for param in reread:
        readers = [block.name_hint for block in blocks if any(r.source.same_as(param) for r in block.reads)]
        first = sch.get_sblock(readers[0])
        index = next(i for i, r in enumerate(sch.get(first).reads) if r.source.same_as(param))
        cache = sch.cache_read(first, index, SHARED, consumer_blocks=[sch.get_sblock(n) for n in readers])
        sch.compute_at(cache, row_rv, preserve_unit_loops=True)
        loops = sch.get_loops(cache)[1:]
        extents = [sch.get(loop).extent for loop in loops]
        if not all(isinstance(e, tirx.IntImm) for e in extents):
            return None
        cached += math.prod(e.value for e in extents) * tvm.runtime.DataType(str(param.dtype)).bits // 8
        if cached > budget:
            return None
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        _, lane = sch.split(fused, [None, threads])
        sch.bind(lane, "threadIdx.x")
    return sch


def only_row_loop(func: tirx.PrimFunc) -> tirx.For | None:
    """The kernel's one top-level loop when it is bound to ``blockIdx.x`` (one row per block)."""
    body = func.body.block.body if isinstance(func.body, SBlockRealize) else func.body
    if (isinstance(body, tirx.For) and body.kind == tirx.ForKind.THREAD_BINDING
            and body.thread_binding.thread_tag == "blockIdx.x"):
        return body
    return None


def thread_extent(loop: tirx.For) -> int | None:
    """The one static extent of the ``threadIdx.x`` loops under ``loop``, else None."""
    extents = set()
    tvm_ffi.structural_walk(loop, [(tirx.For, lambda inner: extents.add(
        inner.extent.value if isinstance(inner.extent, tirx.IntImm) else None)
        if inner.kind == tirx.ForKind.THREAD_BINDING and inner.thread_binding.thread_tag == "threadIdx.x"
        else None)], order="pre")
    return extents.pop() if len(extents) == 1 and None not in extents else None


def shared_bytes(func: tirx.PrimFunc) -> int | None:
    """Bytes of the shared-memory buffers ``func`` allocates (their declared shapes: an upper bound),
    or None where one is not of static size."""
    total = 0
    for buf in func.body.block.alloc_buffers if isinstance(func.body, SBlockRealize) else []:
        if buf.scope() != SHARED:
            continue
        if not all(isinstance(d, tirx.IntImm) for d in buf.shape):
            return None
        total += math.prod(d.value for d in buf.shape) * tvm.runtime.DataType(str(buf.dtype)).bits // 8
    return total

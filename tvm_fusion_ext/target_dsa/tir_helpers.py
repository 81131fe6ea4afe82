"""The DSA memory scopes and small read-only TIR helpers shared by the DSA schedules and the
kernel model (the target-independent ones, such as :func:`~tvm_fusion_ext.tir_passes.analysis.sblocks`,
are in :mod:`tvm_fusion_ext.tir_passes.analysis`).

A buffer's scope says where it lives (GraphTurbo section 1, Fig. 1): :data:`DDR` off chip,
:data:`GB` in a cluster's global buffer, :data:`LB` in a core's local buffer.
"""

from __future__ import annotations

import logging
import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..tir_passes.analysis import sblocks

LB = "local.dsa_lb"
GB = "global.dsa_gb"
DDR = "global"

_LOG = logging.getLogger("tvm_fusion_ext.target_dsa")


def new_schedule(func: tirx.PrimFunc) -> s_tir.Schedule:
    """A schedule of ``func`` for the DSA's staging. Its errors carry the function rendered with
    the failing statement marked (``error_render_level="detail"``) only while this package's
    DSA logger shows debug messages: the kernel generator tries primitives that may fail
    (``compute_at`` into an instance loop, tiles of a layer) thousands of times per model, and
    rendering the function into each error costs more than the primitive (a tenth of a DenseNet
    compile). Copies keep their schedule's level."""
    level = "detail" if _LOG.isEnabledFor(logging.DEBUG) else "none"
    return s_tir.Schedule(func, error_render_level=level)


def has_child_block(block) -> bool:
    """Whether ``block``'s body holds another block (else it is a leaf: one computation)."""
    found: list = []
    tvm_ffi.structural_walk(block.body, [(s_tir.SBlock, found.append)])
    return bool(found)


def leaf_blocks(func: tirx.PrimFunc) -> list:
    """The blocks of ``func`` that hold no other block (the computations), in program order."""
    return [b for b in sblocks(func) if b.name_hint != "root" and not has_child_block(b)]


def live_ranges(leaves: list) -> tuple[dict[str, int], dict[str, int]]:
    """For each buffer name, the index of the first and of the last of ``leaves`` touching it."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, leaf in enumerate(leaves):
        for region in (*leaf.reads, *leaf.writes):
            first.setdefault(region.source.name, index)
            last[region.source.name] = index
    return first, last


def alloc_buffers(func: tirx.PrimFunc) -> list:
    """The buffers the blocks of ``func`` allocate, in program order."""
    return [b for block in sblocks(func) for b in block.alloc_buffers]


def realizes(func: tirx.PrimFunc) -> dict:
    """Block name -> its realize (the last one in post-order where names repeat)."""
    found: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, found.append)])
    return {r.block.name_hint: r for r in found}


def vars_in(expr) -> list:
    """Every variable occurring in ``expr``, repeats included."""
    out: list = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.Var, out.append)])
    return out


def elem_bytes(buf) -> int:
    dtype = tvm.runtime.DataType(str(buf.dtype))
    return max(1, dtype.bits * dtype.lanes // 8)


def buffer_bytes(buf) -> int:
    """Bytes of a buffer of static shape."""
    return math.prod(int(d) for d in buf.shape) * elem_bytes(buf)



def enclosing_only(func: tirx.PrimFunc, target) -> tirx.PrimFunc:
    """``func`` reduced to ``target`` (a statement of its body) and the loops and blocks enclosing
    it: every other statement of a sequence on the way is dropped, allocations stay. Buffers
    touched only inside ``target`` get the same placement and compacted size in the result as in
    ``func`` (TVM's ``PlanAndUpdateBufferAllocationLocation`` puts them at the lowest common
    ancestor of their accesses, inside ``target``), so a kernel model of the result describes
    ``target`` at the cost of its own size rather than the whole function's."""
    body = _prune(func.body, target)
    if body is None:
        raise ValueError("the statement is not in the function")
    return func.with_body(body)


def _prune(stmt, target):
    """``stmt`` with only the statements enclosing ``target`` (None if it does not hold it)."""
    if stmt.same_as(target):
        return stmt
    if isinstance(stmt, tirx.SeqStmt):
        return next((kept for kept in (_prune(child, target) for child in stmt.seq)
                     if kept is not None), None)
    if isinstance(stmt, tirx.For):
        body = _prune(stmt.body, target)
        return None if body is None else tirx.For(
            stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
            stmt.annotations, stmt.step)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        body = _prune(block.body, target)
        return None if body is None else s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, s_tir.SBlock(
            block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
            block.alloc_buffers, block.match_buffers, block.annotations))
    return None

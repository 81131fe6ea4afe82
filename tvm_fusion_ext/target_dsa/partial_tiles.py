"""Matrix-unit tiles whose extents the instruction shape does not divide (GraphTurbo section 5,
CU3).

A tile of ``e`` rows (columns, reduction steps) over an instruction of ``s`` is ``e // s`` full
instructions and one partial instruction over the ``e % s`` left, which the unit runs at the cost
of a full one (``simulator._compute_cycles``). :func:`matrix_efficiency` is the fraction of the
instructions' work a tile does, which decides whether the matrix unit outruns the vector MAC unit
on it, and :func:`split_partial_tiles` rewrites a GEMM's loop nest into one copy per combination
of full and partial pieces of its roles, each a nest one instruction shape tensorizes.
"""

from __future__ import annotations

import itertools
import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.analysis import get_sblock_read_write_region

from .spec import DSASpec


def matrix_efficiency(extents, shape, unit_shape=None) -> float:
    """The fraction of the matrix unit's work that the instructions of ``shape`` covering
    ``extents`` (rows, columns, reduction) do: each extent over whole instructions, and an
    instruction smaller than the unit's ``unit_shape`` (a convolution's columns,
    :func:`.intrinsics.conv_columns`) occupying the unit as a whole one."""
    whole = math.prod(shape) / math.prod(unit_shape) if unit_shape is not None else 1.0
    return whole * math.prod(e / (math.ceil(e / s) * s) for e, s in zip(extents, shape))


def outruns_vector_mac(extents, shape, spec: DSASpec) -> bool:
    """Whether the matrix unit, at :func:`matrix_efficiency` of ``extents``, does more operations
    per cycle than the vector MAC unit."""
    vmac = spec.unit_for("vmac")
    efficiency = matrix_efficiency(extents, shape, spec.matrix_shape)
    return spec.unit_for("matrix").ops_per_cycle * efficiency > (vmac.ops_per_cycle if vmac else 0)


def instruction_shape(extents, shape) -> tuple[int, ...]:
    """The instruction of a block whose role extents are ``extents`` after
    :func:`split_partial_tiles`: the unit's size where it divides, else the tail's extent."""
    return tuple(s if e % s == 0 else e for e, s in zip(extents, shape))


def split_partial_tiles(func: tirx.PrimFunc, outer: str, roles: dict[str, str], shape) \
        -> tuple[tirx.PrimFunc, list[str]]:
    """Rewrite the body of block ``outer`` - a chain of the three loops of a GEMM-shaped block
    whose variables start at zero (what ``blockize`` makes) - into one nest per combination of
    the pieces of each role: the ``e // s * s`` iterations of full instructions and the ``e % s``
    of the partial one (``roles``: role -> the inner block's variable, ``shape``: the
    instruction). Each copy's block has variables of its own from zero (the tail's uses become
    ``v + offset``) and per-iteration regions. Returns the function and the copies' names."""
    names: list[str] = []

    def rewrite(block):
        if block.name_hint != outer:
            return block
        loops, stmt = [], block.body
        while isinstance(stmt, tirx.For):
            loops.append(stmt)
            stmt = stmt.body
        if not isinstance(stmt, s_tir.SBlockRealize):
            raise TypeError(f"block {outer} is not a chain of loops over one block")
        realize, inner = stmt, stmt.block
        size = {iv.var.name: s for iv in inner.iter_vars for role, s in zip("ijk", shape)
                if roles[role] == iv.var.name}
        bound = [_bound_loop(loops, value) for value in realize.iter_values]
        if None in bound:
            raise ValueError(f"block {outer}'s variables are not each one of its loops")
        pieces = []
        for n, loop in enumerate(loops):
            ivs = [iv for iv, m in zip(inner.iter_vars, bound) if m == n]
            extent = int(loop.extent)
            step = size.get(ivs[0].var.name, extent) if ivs else extent
            full = extent // step * step
            pieces.append([(0, extent)] if full in (0, extent) else [(0, full), (full, extent - full)])
        copies = []
        for combo in itertools.product(*pieces):
            names.append(f"{inner.name_hint}_{len(names)}")
            copies.append(_piece(loops, realize, combo, names[-1], buffers))
        return s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint,
                            tirx.SeqStmt(copies) if len(copies) > 1 else copies[0], block.init,
                            block.alloc_buffers, block.match_buffers, block.annotations)

    buffers: dict = {}

    def collect(block):
        for buf in (*block.alloc_buffers, *(r.source for r in (*block.reads, *block.writes))):
            buffers[buf] = buf

    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, collect)])
    return tvm_ffi.structural_map(func, [(s_tir.SBlock, rewrite)]), names


def _piece(loops: list, realize, combo, name: str, buffers: dict):
    """One copy of the loop chain ``loops`` over ``realize``: loop ``n`` runs ``combo[n]``
    (offset, extent); fresh loop and block variables, the block's uses shifted by the offset."""
    inner = realize.block
    fresh_loops = [tirx.Var(loop.loop_var.name, loop.loop_var.ty.dtype) for loop in loops]
    uses, iter_vars, values = [], [], []
    for iv, value in zip(inner.iter_vars, realize.iter_values):
        n = _bound_loop(loops, value)
        offset, extent = combo[n]
        var = tirx.Var(iv.var.name, iv.var.ty.dtype)
        uses.append((iv.var, var + tirx.const(offset, iv.var.ty.dtype) if offset else var))
        iter_vars.append(tirx.IterVar(tvm.ir.Range.from_min_extent(tirx.const(0, iv.var.ty.dtype),
                                                                    tirx.const(extent, iv.var.ty.dtype)),
                                      var, iv.iter_type, iv.thread_tag))
        values.append(fresh_loops[n])

    def substituted(node):
        return None if node is None else tvm_ffi.structural_map(
            node, [(tvm.ir.Var, lambda v: next((new for old, new in uses if old.same_as(v)), v))])

    body, init = substituted(inner.body), substituted(inner.init)
    reads, writes = get_sblock_read_write_region(s_tir.SBlock(
        iter_vars, [], [], name, body, init, inner.alloc_buffers, inner.match_buffers,
        inner.annotations), buffers)
    if init is not None:  # a reduction with its init reads its output as the init's
        reads = [r for r in reads if not any(r.source.same_as(w.source) for w in writes)]
    stmt = s_tir.SBlockRealize(values, realize.predicate, s_tir.SBlock(
        iter_vars, reads, writes, name, body, init, inner.alloc_buffers, inner.match_buffers,
        inner.annotations))
    for loop, var, (_, extent) in reversed(list(zip(loops, fresh_loops, combo))):
        stmt = tirx.For(var, tirx.const(0, var.ty.dtype), tirx.const(extent, var.ty.dtype), loop.kind,
                        stmt, loop.thread_binding, loop.annotations)
    return stmt


def _bound_loop(loops: list, value) -> int | None:
    """The position in ``loops`` of the loop whose variable ``value`` is, else None."""
    return next((n for n, loop in enumerate(loops) if value.same_as(loop.loop_var)), None)

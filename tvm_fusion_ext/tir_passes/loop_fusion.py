"""Anchor-based loop fusion for fused PrimFuncs (GraphTurbo section 4.1, APOLLO section 4.2).

``FuseTIR`` only concatenates the blocks of a fusion group: every intermediate stays a full-size
buffer written by one loop nest and read by the next. Following GraphTurbo section 4.1 ("Loop
Fusion within Layers", Fig. 11), :class:`AnchorLoopFusion`

1. picks the anchor block: the conv / matmul if there is one, else the last block;
2. inlines injective producers (single-consumer or pure data movement) and the element-wise /
   broadcast chain after the anchor (``compute_inline``), so few blocks remain;
3. tiles the anchor's outer spatial loops with the largest divisors whose tile working set fits
   the spec's fast memory (:func:`.analysis.choose_tile`); a contraction also gets a register tile
   (an operand's vector load reused across one loop) and a vector loop;
4. ``compute_at``s the remaining producers (padding, reductions) into the tile loop and
   ``reverse_compute_at``s the consumers into the innermost spatial tile loop, then gives every
   intermediate that now lives inside one tile the ``local`` scope, so lowering
   (``CompactBufferAllocation``) shrinks it to the tile;
5. parallelises the fused outermost tile loop across cores and vectorises innermost loops.

When the anchor is element-wise and reads reduction results (softmax, layer norm, the
reduction -> element-wise stitching of APOLLO section 4.2), only the *row* loops (the anchor loops
that index every reduction-derived input) are tiled, and producers go to the innermost row loop:
each row becomes one loop nest whose per-row intermediates are local scalars or row vectors.

The rule declines (returns ``None``) on functions outside that shape; see ``default_schedule``.
"""

from __future__ import annotations

import math

import tvm_ffi
from tvm import s_tir, tirx

from ..hardware import HardwareSpec
from .analysis import (
    REDUCE,
    BlockInfo,
    analyze_blocks,
    choose_tile,
    pick_anchor,
    try_primitive,
    uses_any,
    vector_factor,
)
from .rule_base import SpecScheduleRule

# Vector registers kept free for operands when sizing the register tile of a contraction.
_OPERAND_REGISTERS = 4


class AnchorLoopFusion(SpecScheduleRule):
    """GraphTurbo section 4.1 loop fusion around an anchor block (see the module docstring)."""

    def schedule(self, sch: s_tir.Schedule, analyzed: list, spec: HardwareSpec):
        infos = [info for _, info in analyzed]
        anchor_name = infos[pick_anchor(infos)].name
        _inline_injective(sch, infos, anchor_name)

        analyzed = analyze_blocks(sch)
        if not analyzed:
            return None
        infos = [info for _, info in analyzed]
        names = [info.name for info in infos]
        anchor = infos[names.index(anchor_name)]
        plan = _plan_tiles(anchor, infos[: names.index(anchor_name)], spec, str(
            anchor.block.writes[0].source.dtype))
        if plan is None:
            return None
        tile_loop, inner_attach = _tile_anchor(sch, anchor, plan, spec)

        producer_attach = inner_attach if not anchor.is_reduction else tile_loop
        for name in reversed(names[: names.index(anchor_name)]):
            try_primitive(sch.compute_at, sch.get_sblock(name), producer_attach, preserve_unit_loops=True)
        for name in names[names.index(anchor_name) + 1:]:
            try_primitive(sch.reverse_compute_at, sch.get_sblock(name), inner_attach, preserve_unit_loops=True)

        if spec.num_cores > 1 and _extent(sch, tile_loop) > 1:
            sch.parallel(tile_loop)
        lanes = spec.vector_lanes(str(anchor.block.writes[0].source.dtype))
        for name in names:
            if name != anchor_name:
                _vectorize_innermost(sch, sch.get_sblock(name), lanes)
        _localize_intermediates(sch, tile_loop)
        _finish_anchor(sch, anchor_name, plan, lanes)
        return sch


class _Plan:
    """Loop positions of the anchor and their tile sizes."""

    def __init__(self, tiled, tile, vector, vector_width, register, register_width):
        self.tiled, self.tile = tiled, tile
        self.vector, self.vector_width = vector, vector_width
        self.register, self.register_width = register, register_width
        self.first_reduce_loop = None  # set by _tile_anchor
        self.vector_loop = self.register_loop = None


def _inline_injective(sch: s_tir.Schedule, infos: list[BlockInfo], anchor_name: str) -> None:
    """Inline the element-wise chain after the anchor and cheap injective producers before it."""
    intermediates = _intermediate_buffers(sch)
    names = [info.name for info in infos]
    anchor_at = names.index(anchor_name)
    for info in reversed(infos):
        if info.name == anchor_name or info.is_reduction:
            continue
        if not any(info.block.writes[0].source.same_as(b) for b in intermediates):
            continue
        rv = sch.get_sblock(info.name)
        before_anchor = names.index(info.name) < anchor_at
        if before_anchor and (info.is_padding or (len(sch.get_consumers(rv)) != 1 and not info.is_copy)):
            continue
        try_primitive(sch.compute_inline, rv)


def _plan_tiles(anchor: BlockInfo, producers: list[BlockInfo], spec: HardwareSpec,
                dtype: str) -> _Plan | None:
    lanes = spec.vector_lanes(dtype)
    vector = anchor.vector_position()
    width = vector_factor(anchor.extents[vector], lanes) if vector is not None else None
    if width is None:
        vector = None
    if anchor.is_reduction:
        tiled = anchor.spatial_positions
        register = anchor.register_position(vector) if (vector is not None and anchor.is_contraction) \
            else None
    else:
        tiled = [p for p in _row_positions(anchor, producers) if p != vector]
        register = None
    if not tiled:
        return None
    register_width = None
    if register is not None:
        budget = max(1, (spec.vector_registers - _OPERAND_REGISTERS) // math.ceil(width / lanes))
        register_width = max(d for d in range(1, budget + 1) if anchor.extents[register] % d == 0)
        if register_width == 1:
            register = register_width = None
    minimum = {}
    if vector is not None and vector in tiled:
        minimum[vector] = width
    if register is not None:
        minimum[register] = register_width
    tile = choose_tile(anchor, tiled, minimum, spec)
    return _Plan(tiled, tile, vector, width, register, register_width)


def _row_positions(anchor: BlockInfo, producers: list[BlockInfo]) -> list[int]:
    """Leading spatial loops of an element-wise anchor that index every reduction-derived input
    (APOLLO section 4.2: the rows along which reduction and element-wise work can be stitched)."""
    derived = []
    for info in producers:
        reads_derived = any(any(r.source.same_as(d) for d in derived) for r in info.block.reads)
        if info.is_reduction or reads_derived:
            derived.append(info.block.writes[0].source)
    rows = []
    for pos, iv in enumerate(anchor.loop_iters):
        indexes_all = all(
            any(uses_any(rg.min, [iv.var]) for rg in read.region)
            for read in anchor.operand_reads if any(read.source.same_as(d) for d in derived))
        if not indexes_all:
            break
        rows.append(pos)
    return rows


def _tile_anchor(sch: s_tir.Schedule, anchor: BlockInfo, plan: _Plan, spec: HardwareSpec):
    """Split and reorder the anchor loops; return (fused tile loop, innermost spatial tile loop)."""
    rv = sch.get_sblock(anchor.name)
    loops = sch.get_loops(rv)
    outer, intra, untiled, reduce, micro = [], [], [], [], []
    for pos, loop in enumerate(loops):
        extent = anchor.extents[pos]
        if anchor.loop_iters[pos].iter_type == REDUCE:
            reduce.append(loop)
            continue
        if pos in plan.tiled:
            inner = plan.tile[pos]
            if pos == plan.vector or pos == plan.register:
                width = plan.vector_width if pos == plan.vector else plan.register_width
                tile_outer, tile_intra, lane = sch.split(loop, [extent // inner, inner // width, width])
                micro.append((pos, lane))
            else:
                tile_outer, tile_intra = sch.split(loop, [extent // inner, inner])
            outer.append(tile_outer)
            intra.append(tile_intra)
        elif pos == plan.vector:
            rest, lane = sch.split(loop, [extent // plan.vector_width, plan.vector_width])
            untiled.append(rest)
            micro.append((pos, lane))
        else:
            untiled.append(loop)
    # Register loop before the vector loop; both innermost (GraphTurbo Fig. 11 "fused computation").
    micro.sort(key=lambda item: item[0] != plan.register)
    micro_loops = [loop for _, loop in micro]
    if anchor.is_reduction:
        order = outer + intra + untiled + reduce + micro_loops
        inner_attach = (intra + untiled)[-1]
    else:
        order = outer + intra + untiled + micro_loops
        inner_attach = intra[-1]
    sch.reorder(*order)
    tile_loop = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    plan.first_reduce_loop = reduce[0] if reduce else None
    for pos, loop in micro:
        if pos == plan.vector:
            plan.vector_loop = loop
        else:
            plan.register_loop = loop
    return tile_loop, inner_attach


def _finish_anchor(sch: s_tir.Schedule, anchor_name: str, plan: _Plan, lanes: int) -> None:
    """Separate the reduction init, vectorise the vector loop and unroll the register loop."""
    rv = sch.get_sblock(anchor_name)
    if plan.vector_loop is not None:
        sch.vectorize(plan.vector_loop)
    if plan.register_loop is not None:
        sch.unroll(plan.register_loop)
    if plan.first_reduce_loop is not None and plan.vector_loop is not None:
        init = sch.decompose_reduction(rv, plan.first_reduce_loop)
        _vectorize_innermost(sch, init, lanes)


def _vectorize_innermost(sch: s_tir.Schedule, rv, lanes: int) -> None:
    """Vectorise a block's innermost loop when it is spatial (split to a vector-sized chunk)."""
    loops = sch.get_loops(rv)
    if not loops:
        return
    loop = sch.get(loops[-1])
    if not isinstance(loop.extent, tirx.IntImm) or loop.kind != tirx.ForKind.SERIAL:
        return
    realize = _realize_of(sch, sch.get(rv).name_hint)
    block = realize.block
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.iter_type != 0 and uses_any(value, [loop.loop_var]):
            return
    extent = int(loop.extent)
    width = vector_factor(extent, lanes)
    if width is None:
        return
    if width == extent:
        sch.vectorize(loops[-1])
    else:
        _, lane = sch.split(loops[-1], [extent // width, width])
        sch.vectorize(lane)


def _localize_intermediates(sch: s_tir.Schedule, tile_loop) -> None:
    """Give ``local`` scope to intermediates whose writer and readers all sit in the tile loop."""
    root = sch.get_sblock("root")
    for rv in sch.get_child_blocks(root):
        block = sch.get(rv)
        if not any(block.writes[0].source.same_as(b) for b in _intermediate_buffers(sch)):
            continue
        users = [rv, *sch.get_consumers(rv)]
        if all(_inside(sch, user, tile_loop) for user in users):
            try_primitive(sch.set_scope, rv, 0, "local")


def _inside(sch: s_tir.Schedule, rv, loop) -> bool:
    loops = sch.get_loops(rv)
    return bool(loops) and sch.get_sref(loops[0]).same_as(sch.get_sref(loop))


def _intermediate_buffers(sch: s_tir.Schedule) -> list:
    return list(sch.get(sch.get_sblock("root")).alloc_buffers)


def _realize_of(sch: s_tir.Schedule, name: str):
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(s_tir.SBlockRealize, found.append)])
    return next(r for r in found if r.block.name_hint == name)


def _extent(sch: s_tir.Schedule, loop) -> int:
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else 0

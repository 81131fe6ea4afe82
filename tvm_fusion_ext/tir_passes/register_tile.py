"""Register-tile plan for a contraction anchor (GraphTurbo section 4.1 tiling, GotoBLAS blocking).

GraphTurbo section 4.1 tiles the anchor so that its working set fits the fast memory. On a CPU
the innermost level of that hierarchy is the register file, so a conv / matmul anchor gets a
*micro-kernel*: ``rows x vectors`` vector accumulators that stay in registers for a whole block
of the reduction (the GotoBLAS / BLIS design):

* the **vector loop** is a spatial loop whose extent is a multiple of the vector lanes. Every
  operand it walks is *streamed*: contiguous along it, or *packed* - copied per tile into a local
  buffer whose last dimension is the vector loop (an NCHW conv weight ``[F, C, R, S]`` becomes
  ``[C, R, S, F]``). An operand that does not use the loop is *broadcast* (one scalar load per
  accumulator row). A loop every operand uses (a depthwise conv's channels in NHWC) is scored
  too: nothing is broadcast, and the register loop is one that some operand does not walk (the
  weight over the output columns), whose vectors each row then reuses; without such a loop the
  plain schedule takes the anchor, as a register tile adds no reuse. When the output is not
  contiguous along the vector loop the
  accumulator is kept in a local buffer with that dimension last (``transposed``);
* the **register loop** is a spatial loop that no streamed operand uses, so each streamed vector
  load is reused ``rows`` times (the ``i`` of a matmul, the output column ``x`` of an NCHW conv;
  for an NHWC depthwise conv, the output column, which its weight does not use);
* ``rows`` and ``vectors`` fit the register file (:func:`registers_needed`: ``rows * vectors``
  accumulators + ``vectors`` operand registers + the broadcasts, + :data:`WINDOW_HEADROOM` when
  there is a reduction window, <= ``spec.vector_registers``). Among the feasible
  micro-kernels (every vector loop, register loop, rows, vectors) the one with the least cycles
  per output element wins: each reduction step costs ``max(rows * vectors / fma_units, (rows +
  vectors) / load_units, fma_latency, line fills)`` cycles for ``rows * vectors * lanes``
  outputs, the line fills being those of the cache lines the step brings from L2
  (:func:`_fill_cycles_per_step`); at every reduction block (below) the micro-kernel loads and stores
  its accumulators (:func:`_reload_cycles`: a wide micro-kernel's larger panels leave it fewer
  steps per block, the GotoBLAS ``k_c`` trade-off); and a transposed accumulator adds
  :data:`_TRANSPOSED_OUTPUT_CYCLES` per output (its strided epilogue), which decides against it
  for short reductions (a 1x1 conv over 16 channels).

Around the micro-kernel the loops are ``[spatial tiles (parallel)] [reduction blocks] [micro-
kernels of one tile] [reduction within a block] [register loop] [vector loop]``:

* the **reduction block** is the largest (innermost loops first) whose operand panels for one
  micro-kernel fit :meth:`~tvm_fusion_ext.hardware.HardwareSpec.panel_bytes` (L1 on a CPU);
* the **spatial tile** minimises the operand traffic of the whole contraction (region per tile x
  number of tiles) among tiles whose working set for one reduction block fits half of
  ``spec.fast_memory_bytes`` (L2 on a CPU, the LB on a DSA) and whose count is a multiple of
  the cores (when such tiles exist), so every core gets the same share.

Everything is read off the block's index maps (:func:`.analysis.accesses`), never op names.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from tvm import sym

from ..hardware import HardwareSpec
from .analysis import CACHE_LINE_BYTES, BlockInfo, divisors, flattened_index, is_const_one, uses_any

# At most this many spatial tile shapes are scored; longer candidate lists are thinned.
_MAX_TILE_SHAPES = 4096
# Extra cycles per output element of a transposed accumulator (initialised and spilled in memory,
# read back strided by the epilogue), measured on a 1x1 conv 16 -> 96 channels at 112 x 112
# (znver3): vectorising the output channel cost 1.2 ns per output more than the output column.
_TRANSPOSED_OUTPUT_CYCLES = 3.0


# Relative difference in cycles per output (reloads included) below which two micro-kernels count
# as equally fast (see ``_best_micro_kernel``).
RELOAD_TOLERANCE = 0.05


# Vector registers left free when the contraction has a reduction window (a conv's R x S, which
# the schedule unrolls in part or whole): LLVM then loads the operands of several window steps
# ahead, and a micro-kernel that fills the register file spills its accumulators (a 14 x 2
# micro-kernel of a 3 x 3 conv on AVX-512: 82 spills and reloads per 252 FMAs; none with 2 free).
WINDOW_HEADROOM = 2


def has_window(info: BlockInfo) -> bool:
    """Whether more than one reduction loop iterates (a conv's channels and its R x S window)."""
    return sum(1 for p in info.reduce_positions if info.extents[p] > 1) > 1


@dataclass(frozen=True)
class RegisterTile:
    """Loop positions, micro-kernel and blocking of one contraction anchor."""

    vector: int                 # loop position of the vectorised spatial loop
    lanes: int
    vectors: int                # vector registers per accumulator row
    register: int | None        # loop position of the register (unrolled) loop
    rows: int                   # accumulator rows along the register loop
    packed: tuple[int, ...]     # positions in ``BlockInfo.operand_reads`` to pack
    transposed: bool            # accumulate in a local buffer whose last dimension is the vector loop
    reduce_block: dict[int, int] = field(default_factory=dict)  # reduce position -> inner extent
    tile: dict[int, int] = field(default_factory=dict)          # spatial position -> tile extent

    @property
    def micro(self) -> dict[int, int]:
        """Loop extents of one micro-kernel (spatial loops only)."""
        micro = {self.vector: self.vectors * self.lanes}
        if self.register is not None:
            micro[self.register] = self.rows
        return micro


def plan_register_tile(info: BlockInfo, spec: HardwareSpec, lanes: int | None = None,
                       prepacked: Collection = ()) -> RegisterTile | None:
    """The register tile of contraction ``info`` on ``spec``, or ``None`` when no spatial loop
    can be vectorised that way (no extent is a multiple of the lanes, or every operand uses it)
    or when the fastest micro-kernel reuses no operand load (see :func:`_micro_kernels`).
    ``lanes`` defaults to the spec's full vector width for the output's dtype; ``prepacked`` are
    the operand buffers the schedule lays out at compile time (layout-free weights, see
    ``loop_fusion.layout_free_buffers``), whose panels are contiguous."""
    lanes = lanes or spec.vector_lanes(str(info.block.writes[0].source.dtype))
    best = _best_micro_kernel(info, lanes, spec, prepacked)
    if best is None:
        return None
    micro = best[1]
    reduce_block = _reduce_block(info, micro, _contiguous(info, micro.packed, prepacked), spec.panel_bytes())
    tile = _spatial_tile(info, micro, reduce_block, spec)
    return replace(micro, reduce_block=reduce_block, tile=tile)


def micro_kernel_cycles(info: BlockInfo, spec: HardwareSpec, lanes: int | None = None,
                        prepacked: Collection = ()) -> float | None:
    """Cycles per output element of the micro-kernel :func:`plan_register_tile` picks for
    contraction ``info`` (its strided epilogue included when the accumulator is transposed), or
    ``None`` when it would plan none: the figure two forms of one contraction are compared by."""
    lanes = lanes or spec.vector_lanes(str(info.block.writes[0].source.dtype))
    best = _best_micro_kernel(info, lanes, spec, prepacked)
    return None if best is None else -best[0][0]


def _best_micro_kernel(info: BlockInfo, lanes: int, spec: HardwareSpec, prepacked: Collection):
    """The best ``(key, micro-kernel, reuses)`` of :func:`_micro_kernels`, or ``None`` when
    there is none or it reuses no operand load; ``-key[0]`` is its cycles per output with its
    accumulator reloads (:func:`_reload_cycles`).

    The reloads decide only between micro-kernels they separate by more than
    :data:`RELOAD_TOLERANCE`; within it, :func:`_micro_kernels`' order stands (fewer cycles per
    step, then more accumulators), which the step model cannot see through: on AVX2, BERT's
    GEMMs ran 5-8% faster with 4 x 3 accumulators than with 4 x 2, which fill the FMA pipes as
    well and reload a little less. Candidates are taken cheapest first, and the search stops
    where their cycles without reloads are out of reach, so only the few that can win get their
    reduction block planned."""
    scored, best_total = [], math.inf
    for key, micro, reuses in sorted(_micro_kernels(info, lanes, spec, prepacked),
                                         key=lambda item: item[0], reverse=True):
        if -key[0] > best_total * (1 + RELOAD_TOLERANCE):
            break
        total = -key[0] + _reload_cycles(info, micro, prepacked, spec)
        best_total = min(best_total, total)
        scored.append((total, key, micro, reuses))
    if not scored:
        return None
    total, key, micro, reuses = max(
        (item for item in scored if item[0] <= best_total * (1 + RELOAD_TOLERANCE)), key=lambda item: item[1])
    return ((-round(total, 9), *key[1:]), micro, reuses) if reuses else None


def _reload_cycles(info: BlockInfo, micro: RegisterTile, prepacked: Collection, spec: HardwareSpec) -> float:
    """Cycles per output element the micro-kernel spends loading and storing its accumulators,
    once per reduction block (:func:`_reduce_block`): a 3x3 conv over 256 channels at 14 x 14
    (AVX-512) ran 189 GFLOP/s with 8 x 2 vectors, whose weight panel leaves 9 steps per block,
    and 219 with 2 x 7, 72 steps per block, which the step cycles alone score the same."""
    block = _reduce_block(info, micro, _contiguous(info, micro.packed, prepacked), spec.panel_bytes())
    blocks = math.prod(info.extents[p] for p in info.reduce_positions) / math.prod(block.values())
    return blocks * (1 / spec.load_units + 1 / spec.store_units) / micro.lanes


def _contiguous(info: BlockInfo, packed: tuple[int, ...], prepacked: Collection) -> set[int]:
    """Operands whose panels are contiguous: packed per tile, or laid out at compile time."""
    return {i for i, read in enumerate(info.operand_reads)
            if i in packed or any(read.source.same_as(b) for b in prepacked)}


def _micro_kernels(info: BlockInfo, lanes: int, spec: HardwareSpec, prepacked: Collection = ()):
    """``(key, RegisterTile without blocking, reuses)`` for every feasible micro-kernel; larger
    key is better: fewer cycles per output, then more accumulators, fewer packed operands, more
    rows. The third item (``reuses``) is false for a micro-kernel that streams every operand
    without a register loop (one row): a register tile adds no reuse to it, so when it is the
    fastest, :func:`plan_register_tile` leaves the anchor to the plain schedule, which vectorises
    that loop too. Scored with the others, it keeps a worse plan from winning: a batch-8 NHWC
    depthwise conv vectorised along the batch, its input packed per channel at every tile."""
    operands = info.operand_reads
    uses = {p: [bool(_dims_using(read, info.loop_iters[p].var)) for read in operands]
            for p in info.spatial_positions}  # spatial loop -> which operands it walks
    reduction = math.prod(info.extents[p] for p in info.reduce_positions)
    # Maps of one image (one iteration of the outermost spatial loop, the batch) that do not fit
    # the cores' fast memories are streamed from the next level, which the register tile's reuse
    # in registers and L1 does not speed up (MobileNetV2's 56 x 56 x 144 depthwise conv: 1.2x
    # slower in the model; its 14 x 14 ones 1.4x faster, and 1.9x at batch 8 in EfficientNet-B0):
    # a depthwise conv on such maps gets no register loop.
    one_image = [1 if p == info.spatial_positions[0] else e for p, e in enumerate(info.extents)]
    image_fits = _bytes(info, one_image) <= spec.fast_memory_bytes * spec.num_cores
    output = info.block.writes[0]
    headroom = WINDOW_HEADROOM if has_window(info) else 0
    for v in info.spatial_positions:
        extent = info.extents[v]
        if extent % lanes:
            continue
        var = info.loop_iters[v].var
        streamed = [i for i in range(len(operands)) if uses[v][i]]
        # Every operand streamed (a depthwise conv along its channels): nothing is broadcast. A
        # register loop is then one that some operand does not walk (the output columns, which
        # the weight does not use): that operand's vectors are loaded once per step and reused by
        # every row, the others loaded per row.
        every_streamed = len(streamed) == len(operands)
        reusing = not every_streamed or image_fits
        kinds = [_walk(operands[i], var) for i in streamed]
        out_kind = _walk(output, var)
        if None in kinds or out_kind is None:
            continue
        packed = tuple(i for i, kind in zip(streamed, kinds) if kind == "packed")
        transposed = out_kind == "packed"
        contiguous = _contiguous(info, packed, prepacked)
        candidates = [None] + [
            q for q in info.spatial_positions
            if reusing and q != v and info.extents[q] > 1
            and (not all(uses[q][i] for i in streamed) if every_streamed
                 else not any(uses[q][i] for i in streamed))]
        for q in candidates:
            row_choices = divisors(info.extents[q]) if q is not None else [1]
            per_row = sum(1 for i in streamed if q is not None and uses[q][i])
            loads = (per_row, len(streamed) - per_row) if every_streamed else None
            for vectors in divisors(extent // lanes):
                for rows in row_choices:
                    if registers_needed(rows, vectors, headroom, loads) > spec.vector_registers:
                        continue
                    micro = {v: vectors * lanes, **({q: rows} if q is not None else {})}
                    fill = _fill_cycles_per_step(info, micro, contiguous, uses, spec)
                    cost = reduction * _step_cycles(rows, vectors, fill, spec, loads) / (rows * vectors * lanes)
                    cost += _TRANSPOSED_OUTPUT_CYCLES if transposed else 0.0
                    key = (-round(cost, 9), rows * vectors, -len(packed), rows, -1 if q is None else q)
                    yield (key, RegisterTile(v, lanes, vectors, q, rows, packed, transposed),
                           not every_streamed or rows > 1)


def registers_needed(rows: int, vectors: int, headroom: int,
                     streamed_operands: tuple[int, int] | None = None) -> int:
    """Vector registers a ``rows x vectors`` micro-kernel holds at once: its accumulators, the
    ``vectors`` streamed operands of one reduction step, and either one broadcast register and the
    window's ``headroom``, or, with a single streamed vector, one register per row: each broadcast
    then feeds one FMA, and LLVM issues all of a step's broadcasts ahead of its FMAs (an 8 x 1
    micro-kernel of a 1x1 conv over 56 columns spilled an accumulator every other step, at 37%
    of the FMA peak; 4 x 2 along the output channels, 1.7x faster). With ``streamed_operands``
    (every operand streamed, none broadcast: how many walk the register loop, how many do not) a
    step holds a vector per accumulator of each operand walking the register loop (the window's
    unrolled steps share them: a row's input at ``rx + 1`` is the next row's at ``rx``, and LLVM
    keeps them live) and a vector per column of the others."""
    if streamed_operands is not None:
        per_row, reused = streamed_operands
        return rows * vectors * (1 + per_row) + reused * vectors + headroom
    broadcasts = rows if vectors == 1 else 1
    return rows * vectors + vectors + max(broadcasts, 1 + headroom)


def _step_cycles(rows: int, vectors: int, fill_cycles: float, spec: HardwareSpec,
                 streamed_operands: tuple[int, int] | None = None) -> float:
    """Cycles of one reduction step of a ``rows x vectors`` micro-kernel whose cache lines take
    ``fill_cycles`` to bring into L1 (:func:`_fill_cycles_per_step`): FMA throughput, load
    throughput (``vectors`` streamed loads + ``rows`` broadcasts; when nothing is broadcast,
    ``streamed_operands = (per_row, reused)``: a vector load per row and column of the operands
    walking the register loop, per column of the others), the FMA latency chain, or the line
    fills."""
    if streamed_operands is None:
        loads = rows + vectors
    else:
        per_row, reused = streamed_operands
        loads = (per_row * rows + reused) * vectors
    return max(rows * vectors / spec.fma_units, loads / spec.load_units, spec.fma_latency, fill_cycles)


def _fill_cycles_per_step(info: BlockInfo, micro: dict[int, int], contiguous: set[int],
                          uses: dict[int, list[bool]], spec: HardwareSpec) -> float:
    """Cycles to bring the cache lines the operands of one micro-kernel read per step of the
    innermost reduction loop (amortised over that loop) from L2 into L1. A contiguous walk (a
    matmul row, a packed panel) brings its bytes, a strided one a line per step however little of
    it is used (an NCHW conv's input, one row per channel: a 1 x 7-vector micro-kernel over 56
    columns brings 4 lines per 7 FMAs). A line takes ``spec.line_fill_cycles``, except the first
    line of each contiguous run when each step of the operand jumps ``spec.prefetch_stride_bytes``
    or more (a row of ``X[C, H*W]`` per input channel at 28 x 28): the prefetchers do not run
    ahead of such a walk, and that line takes ``spec.strided_line_cycles``. An operand the
    innermost loop over micro-kernels does not walk is read again by the next micro-kernel and
    stays in L1 (the weight panel of a micro-kernel along the output channels, reused over the
    columns): it brings nothing. ``uses[p][i]``: whether spatial loop ``p`` walks operand ``i``."""
    inner = next((p for p in reversed(info.reduce_positions) if info.extents[p] > 1), None)
    if inner is None:
        return 0.0
    across = next((p for p in reversed(info.spatial_positions) if info.extents[p] > micro.get(p, 1)), None)
    walked = [True] * len(info.operand_reads) if across is None else uses[across]
    extents = [micro.get(p, 1) for p in range(len(info.extents))]
    extents[inner] = info.extents[inner]
    cycles = 0.0
    for i in range(len(info.operand_reads)):
        if not walked[i]:
            continue
        access = info.accesses[i]
        lines = _cached_bytes(info, extents, contiguous, {i}) / info.extents[inner] / CACHE_LINE_BYTES
        jumps = 0.0
        if i not in contiguous and access.stride_bytes(inner) >= spec.prefetch_stride_bytes:
            jumps = min(lines, access.runs(extents) / info.extents[inner])
        cycles += jumps * spec.strided_line_cycles + (lines - jumps) * spec.line_fill_cycles
    return cycles


def _dims_using(region, var) -> list[int]:
    return [d for d, rg in enumerate(region.region) if uses_any(rg.min, [var])]


def _walk(region, var) -> str | None:
    """How ``region`` is walked by loop variable ``var``: ``"contiguous"`` (only its last index
    uses ``var``, with stride 1: ``x`` or ``x + rx``), ``"packed"`` (only another index uses it,
    and that index is exactly ``var``: contiguous once the dimension is moved last), ``"none"``
    (not used) or ``None`` (strided, or several indices use it)."""
    dims = _dims_using(region, var)
    if not dims:
        return "none"
    if len(dims) != 1:
        return "contiguous" if _flat_stride_one(region, dims[0], var) else None
    index = region.region[dims[0]].min
    if dims[0] == len(region.region) - 1:
        coeffs = sym.detect_linear_equation(index, [var])
        return "contiguous" if len(coeffs) == 2 and is_const_one(coeffs[0]) else None
    return "packed" if index.same_as(var) else None


def _flat_stride_one(region, first: int, var) -> bool:
    """Whether the dimensions of ``region`` from ``first`` to the last, all single points, index
    memory with stride 1 along ``var`` once flattened: ``[k, i // 28, i % 28]``, a reshape
    ``FuseTIR`` inlined in front of a contraction, reads ``[k, i]`` of the same bytes."""
    ranges = list(region.region)
    flat = flattened_index(ranges, [int(n) for n in region.source.shape], first, len(ranges))
    if flat is None:
        return False
    coeffs = sym.detect_linear_equation(flat, [var])
    return len(coeffs) == 2 and is_const_one(coeffs[0])


def _reduce_block(info: BlockInfo, micro: RegisterTile, contiguous: set[int], budget: int) -> dict[int, int]:
    """Inner extent of each reduce loop: innermost loops whole while one micro-kernel's panels fit
    ``budget``; the first loop that does not fit gets its largest fitting divisor, outer ones 1.
    A panel counts the cache lines it occupies (:meth:`~.analysis.Access.line_bytes`): an NCHW
    conv's input walked along its channels brings a line per channel for a short row of it (a
    7 x 7 map: 28 bytes of every 64-byte line used), and a block sized by its elements alone
    overflows L1. The ``contiguous`` operands (packed per tile or at compile time) count their
    bytes."""
    extents = [micro.micro.get(p, 1) if p in info.spatial_positions else 1 for p in range(len(info.extents))]

    block = {}
    for pos in reversed(info.reduce_positions):
        fitting = [d for d in divisors(info.extents[pos])
                   if _cached_bytes(info, [d if p == pos else e for p, e in enumerate(extents)], contiguous)
                   <= budget]
        block[pos] = max(fitting, default=1)
        extents[pos] = block[pos]
        if block[pos] < info.extents[pos]:
            break
    return {pos: block.get(pos, 1) for pos in info.reduce_positions}


def _spatial_tile(info: BlockInfo, micro: RegisterTile, reduce_block: dict[int, int],
                  spec: HardwareSpec) -> dict[int, int]:
    """The spatial tile with the least total operand traffic whose working set for one
    reduction block fits half the fast memory, among those giving every core work and the same
    number of tiles (when there are such tiles)."""
    spatial = info.spatial_positions
    minimum = micro.micro
    choices = [[d for d in divisors(info.extents[p]) if d % minimum.get(p, 1) == 0] for p in spatial]
    while math.prod(len(c) for c in choices) > _MAX_TILE_SHAPES:
        longest = max(range(len(choices)), key=lambda i: len(choices[i]))
        choices[longest] = choices[longest][::2] + ([choices[longest][-1]] if len(choices[longest]) % 2 == 0 else [])
    budget = spec.fast_memory_bytes // 2
    best = None
    for sizes in itertools.product(*choices):
        tile = dict(zip(spatial, sizes))
        tiles = math.prod(info.extents[p] // tile[p] for p in spatial)
        working = _bytes(info, [tile.get(p, reduce_block.get(p)) for p in range(len(info.extents))])
        traffic = tiles * _bytes(info, [tile.get(p, info.extents[p]) for p in range(len(info.extents))])
        key = (working > budget, tiles < spec.num_cores, tiles % spec.num_cores != 0,
               working if working > budget else traffic, tiles)
        if best is None or key < best[0]:
            best = (key, tile)
    return best[1]


def _bytes(info: BlockInfo, extents: list[int]) -> int:
    return sum(a.bytes(extents) for a in info.accesses)


def _cached_bytes(info: BlockInfo, extents: list[int], contiguous: set[int], which=None) -> float:
    """Bytes of cache the accesses ``which`` (all, by default) of ``info`` occupy over ``extents``:
    the ``contiguous`` operands their bytes, the others their lines (:meth:`~.analysis.Access.line_bytes`)."""
    return sum(a.bytes(extents) if i in contiguous else a.line_bytes(extents)
               for i, a in enumerate(info.accesses) if which is None or i in which)

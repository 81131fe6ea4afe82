"""Staging of GraphTurbo's kernel for one sub-graph on the DSA (graphturbo-dsa-scheduling.txt
section 4, Fig. 10-13): the per-core pieces (:func:`stage_subgraph`) and the layer-bound form
(:func:`stage_layers`).

A ``graphturbo`` sub-graph reaches the DSA as one PrimFunc (``FuseTIR`` of the group) with the graph
scheduler's :class:`~tvm_fusion_ext.partitioners.graphturbo.kernel_plan.SubgraphPlan` (BestSplit
dimension and instance count, Algorithm 4's binding, Fig. 15's switches). :func:`stage_subgraph`
writes the paper's kernel into that TIR:

1. **Instances bound to cores** (sections 3.3, 3.4): the output is split along the plan's dimension
   into its instances, and along bindable dimensions into one *piece* per core (and more where a
   piece does not fit LB); the outer loops are fused into one loop annotated ``dsa.tile`` and
   bound to every core. Every layer is ``compute_at`` into that loop, so one iteration runs the
   whole sub-graph on one core's slice; TVM infers the halo a windowed op needs, and the simulator
   counts the operations recomputing it.
2. **Buffer stitching** (section 4.2, Fig. 10): layer outputs inside a piece are allocated in LB
   (``local.dsa_lb``), released after their last use; if the live ones do not fit, the longest
   lived are spilled to GB, then DDR (section 4.3, Fig. 12, via
   :func:`~tvm_fusion_ext.partitioners.graphturbo.memory.allocate`). Without stitching (Fig. 15's
   first bar) they all go to GB.
3. **Loop fusion within layers, weight promotion** (section 4.1, Fig. 11): element-wise ops are
   inlined into the element-wise op after them (epilogues, padding), never into a reduction;
   activation inputs are DMA'd DDR -> LB once per piece and the output LB -> DDR once per piece.
   Weights (inputs every piece reads whole) are promoted DDR -> GB once per cluster before the
   piece loop, then GB -> LB per chunk of the anchor reading them: each reduction (conv, matmul)
   is tiled along the output dimension indexing its weight (and along its reduction when one output
   slice of the weight exceeds the promotion buffer, ``lb_bytes / WEIGHT_BUFFER_FRACTION``). An
   anchor reading a spilled tensor stages it into LB per chunk the same way and writes a spilled
   output back per chunk.
4. **Across-layer instruction scheduling** (section 4.4, Fig. 13): the piece loop is double
   buffered, so the next piece's promotions overlap this piece's layers.

:mod:`.instance_schedule` chooses among the staged candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..analysis.primitive_types import indexed_by_data
from ..partitioners.graphturbo.kernel_plan import SubgraphPlan
from ..partitioners.graphturbo.memory import Tensor, allocate, live_peak
from ..tir_passes.analysis import block_names, compact_buffers, divisors, is_reduction, try_primitive
from .intrinsics import conv_columns, conv_operands, conv_roles, gemm_vars, tensorize_func
from .kernel_model import (
    CORES,
    DOUBLE_BUFFER,
    INSTANCES,
    MOVEMENT,
    TILE,
    gb_slices,
    index_select,
    kernel_model,
    level_of,
    loaded_buffers,
    read_in_place,
    sliced_scope,
)
from .layer_windows import LayerWindows, WindowTooSmall
from .partial_tiles import matrix_efficiency
from .simulator import fits, kernel_cycles
from .spec import DSASpec
from .tir_helpers import (
    DDR,
    GB,
    LB,
    alloc_buffers,
    buffer_bytes,
    elem_bytes,
    enclosing_only,
    leaf_blocks,
    live_ranges,
    new_schedule,
    realizes,
    vars_in,
)

# One promoted weight chunk takes at most this fraction of LB (section 2.2: "a small, fixed size
# of buffers in LB to allow for the promotion of such tensors").
WEIGHT_BUFFER_FRACTION = 4
# Divisors tried per tiled loop of an anchor, spread from the smallest to the largest.
MAX_TILE_OPTIONS = 8
# Divisors tried per tiled loop that takes multiples of the matrix unit only: few enough to try
# all, among them the sizes that give every core a tile (48 of 768 on 32 cores).
MAX_MATRIX_TILE_OPTIONS = 16
# Cheapest tiles of a layer staged, in the layer-bound form, until one's allocated LB fits.
MAX_LAYER_TILE_TRIALS = 4
# What FuseTIR appends to the name of an op's output it allocates inside a fused kernel.
FUSED_OUTPUT_TAG = "_intermediate"
# Tiles of a stitched run of layers staged and simulated (:func:`_stage_stitched`).
MAX_STITCH_TRIALS = 4
# Spatial loops a layer's tile may split while larger tiles fit (images, channels, rows).
ROW_TILED_LOOPS = 3
# The loop over clusters that wraps the weight promotions (:func:`_promote_per_cluster`).
CLUSTER_LOOP = "cluster"
# structural hash -> (function, the function after _inline_elementwise)
_INLINED: dict = {}
# (layer block, its loops, double buffering, spec) -> :func:`_ranked_layer_tiles`: the kernel
# generator stages a layer in many candidate kernels (instance counts, Fig. 15's bars).
_RANKED_TILES: dict = {}


class Unsupported(Exception):
    """The sub-graph cannot be staged this way (the caller falls back to the per-kernel schedule)."""


class NothingStitched(Unsupported):
    """:func:`stage_layers` with ``stitch_runs`` stitched no run of layers: the form would be
    the one staged without ``stitch_runs``, which the caller stages as well."""


@dataclass(frozen=True)
class Placement:
    """Where a piece's tensors go (section 4.3): ``spill`` names the ones not in LB (a layer output
    by its buffer name, an activation input or an output by its parameter name) with their scope;
    ``lb_peak`` / ``gb_peak`` are the live bytes of the others in LB and of the spilled ones in
    one core's GB share."""

    spill: dict = field(default_factory=dict)
    lb_peak: int = 0
    gb_peak: int = 0


def stage_subgraph(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan,
                   splits: dict[int, int], placement: Placement | None = None,
                   windows: bool = True) -> tirx.PrimFunc:
    """The kernel of the module docstring, with the output split ``{dim: pieces}`` and the piece
    tensors placed per ``placement`` (default: all in LB). The anchors' chunk buffers get what LB
    leaves beside the piece tensors (halved when double-buffered), the promoted weights what GB
    leaves beside the spilled piece tensors of a cluster's cores. The anchors are staged one
    :class:`.layer_windows.LayerWindows` window of the piece loop's body at a time (``windows``,
    the same function as staging them on the whole function)."""
    placement = placement or Placement()
    spill = placement.spill
    sch, piece, weights = _pieces(func, plan, splits, spill)
    intermediates = {b.name for b in alloc_buffers(func)}
    for rv in _block_rvs(sch):
        buf = sch.get(rv).writes[0].source
        if buf.name in intermediates and buf.scope() != spill.get(buf.name, LB):
            sch.set_scope(rv, 0, spill.get(buf.name, LB))
    double = 2 if plan.options.instruction_scheduling else 1
    chunk_budget = max(spec.lb_bytes // WEIGHT_BUFFER_FRACTION,
                       (spec.lb_bytes - placement.lb_peak) // double)
    promote_budget = spec.gb_bytes - spec.cores_per_cluster * placement.gb_peak
    _annotate(sch, piece, spec, plan)
    staged = _stage_operands(sch, spec, weights, piece, chunk_budget, promote_budget, windows)
    return _promote_per_cluster(_tensorize(staged, spec, sch.get(piece).loop_var, windows), spec,
                                plan.options.instruction_scheduling)


def stage_pieces(func, spec: DSASpec, plan: SubgraphPlan, splits: dict[int, int]) -> tirx.PrimFunc:
    """The pieces without weight staging: enough to count operations and size piece tensors."""
    sch, piece, _ = _pieces(func, plan, splits, {})
    _annotate(sch, piece, spec, plan)
    return sch.mod["main"]


def _pieces(func: tirx.PrimFunc, plan: SubgraphPlan, splits: dict[int, int],
            spill: dict[str, str]) -> tuple[s_tir.Schedule, object, set[str]]:
    """Items 1 and 3 of the module docstring without the weights: inline element-wise ops, cache
    the outputs, split them into pieces, ``compute_at`` every block into the piece loop and stage
    the activation inputs per piece. Returns the schedule, the piece loop and the parameters left
    to stage (the weights: every piece reads them whole)."""
    sch = _inlined_schedule(func)
    params = {p.name for p in sch.mod["main"].params}
    outputs = [rv for rv in _block_rvs(sch) if any(w.source.name in params for w in sch.get(rv).writes)]
    if not outputs:
        raise Unsupported("no block writes an output")
    anchor = _anchor_output(sch, outputs, plan.output_shape)

    def cache_output(rv):
        return sch.cache_write(rv, 0, spill.get(sch.get(rv).writes[0].source.name, LB))

    store = cache_output(anchor)
    piece = _piece_loop(sch, store, splits)
    others = [cache_output(rv) for rv in outputs if not sch.get(rv).same_as(sch.get(anchor))]
    skip = {sch.get(rv).name_hint for rv in (store, *others)}
    for rv in reversed(_block_rvs(sch)):
        if sch.get(rv).name_hint not in skip:
            try_primitive(sch.compute_at, rv, piece, preserve_unit_loops=True)
    for rv in others:
        if not try_primitive(sch.reverse_compute_at, rv, piece, preserve_unit_loops=True):
            raise Unsupported("a second output cannot follow the piece loop")
    piece_var = sch.get(piece).loop_var
    by_name = realizes(sch.mod["main"])
    weights = set()
    for pname, names in _param_readers(by_name, params).items():
        if not any(_depends_on(by_name[n], pname, piece_var) for n in names):
            weights.add(pname)
            continue
        first = sch.get_sblock(names[0])
        copy = sch.cache_read(first, _read_index(sch, first, pname), spill.get(pname, LB))
        if not try_primitive(sch.compute_at, copy, piece, preserve_unit_loops=True):
            raise Unsupported(f"input {pname} cannot be staged per piece")
    return sch, piece, weights


def _tensorize(func: tirx.PrimFunc, spec: DSASpec, loop_var, windows: bool) -> tirx.PrimFunc:
    """GEMM-shaped anchors on the matrix unit (:mod:`.intrinsics`); ``loop_var``: the root loop
    holding the layers (None: the root holds them), ``windows``: as :func:`.intrinsics.tensorize_func`."""
    return tensorize_func(_unique_block_names(func), spec, loop_var, windows)


def _unique_block_names(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with duplicate block names (cache stages of one buffer for several consumers)
    made unique with a ``_<k>`` suffix: name lookups and ``Schedule.copy`` need unique names."""
    seen: set[str] = set()

    def rename(block):
        name, k = block.name_hint, 1
        while name in seen:
            name, k = f"{block.name_hint}_{k}", k + 1
        seen.add(name)
        if name == block.name_hint:
            return block
        return s_tir.SBlock(block.iter_vars, block.reads, block.writes, name, block.body, block.init,
                            block.alloc_buffers, block.match_buffers, block.annotations)

    return tvm_ffi.structural_map(func, [(s_tir.SBlock, rename)])


def _annotate(sch, piece, spec: DSASpec, plan: SubgraphPlan) -> None:
    sch.annotate(piece, TILE, 1)
    sch.annotate(piece, CORES, spec.num_cores)
    sch.annotate(piece, DOUBLE_BUFFER, int(plan.options.instruction_scheduling))


def _param_readers(by_name: dict, params: set) -> dict[str, list[str]]:
    """Blocks reading each input parameter among ``params``, in program order. A parameter some
    block writes is an output (a multi-output sub-graph reads its earlier outputs): it is not
    there before the kernel runs, so it is never staged or promoted as an input; nor is one read
    through data-dependent indices or at several indices in one block
    (:func:`.kernel_model.read_in_place`)."""
    written = {w.source.name for realize in by_name.values() for w in realize.block.writes}
    written |= {r.source.name for realize in by_name.values() for r in realize.block.reads
                if read_in_place(realize.block, r)}
    readers: dict[str, list[str]] = {}
    for name, realize in by_name.items():
        for region in realize.block.reads:
            source = region.source.name
            if source in params and source not in written and name not in readers.setdefault(source, []):
                readers[region.source.name].append(name)
    return readers


def _stage_operands(sch: s_tir.Schedule, spec: DSASpec, weights: set[str], piece, budget: int,
                    promote_budget: int, windows: bool = True) -> tirx.PrimFunc:
    """Weights (parameters every piece reads whole) DDR -> GB once, in order of use while they fit
    ``promote_budget``, then -> LB per chunk of the anchor reading them, or per piece for small
    operands of element-wise ops; an anchor's other operands in GB or DDR (spilled tensors) -> LB
    per chunk of at most ``budget`` bytes, and a spilled anchor output written back per chunk
    (module docstring, item 3), each anchor in a window of the piece loop's body. Returns the
    staged function."""
    by_name = realizes(sch.mod["main"])
    small: list[tuple[str, str]] = []  # (first reader, staged buffer) copied to LB per piece
    for pname, names in _param_readers(by_name, weights).items():
        first = sch.get_sblock(names[0])
        source = pname
        size = buffer_bytes(sch.get(first).reads[_read_index(sch, first, pname)].source)
        if size <= promote_budget:
            promote_budget -= size
            copy = sch.cache_read(first, _read_index(sch, first, pname), GB)
            source = sch.get(copy).writes[0].source.name
        anchor_read = len(names) == 1 and is_reduction(by_name[names[0]].block)
        if not anchor_read and size <= spec.lb_bytes // WEIGHT_BUFFER_FRACTION:
            small.append((names[0], source))
    for reader, name in small:  # one LB copy per piece, read by every reader
        rv = sch.get_sblock(reader)
        copy = sch.cache_read(rv, _read_index(sch, rv, name), LB)
        sch.compute_at(copy, piece, preserve_unit_loops=True)
    anchors = [sch.get(rv).name_hint for rv in _block_rvs(sch) if is_reduction(sch.get(rv))]
    piece_var = sch.get(piece).loop_var
    staged = LayerWindows(sch.mod["main"], piece_var, windows)

    def operands(trial, rvs, whole):
        _stage_anchor_operands(trial, rvs[0], spec, _root_loop(trial, piece_var), budget)
        return trial

    for name in anchors:
        staged.stage([name], operands)
    return staged.func


def _root_loop(sch: s_tir.Schedule, var):
    """The root loop over ``var`` (found through the blocks inside it)."""
    for rv in _block_rvs(sch):
        loops = sch.get_loops(rv)
        if loops and sch.get(loops[0]).loop_var.same_as(var):
            return loops[0]
    raise ValueError(f"no root loop over {var}")


def _stage_anchor_operands(sch: s_tir.Schedule, rv, spec: DSASpec, piece, budget: int) -> None:
    """Anchor ``rv`` (a reduction inside loop ``piece``) reading operands from GB or DDR, or
    writing a spilled output: its loops below ``piece`` chunked (:func:`_chunk_loops`), each
    operand staged into LB per chunk and a spilled output written back per chunk."""
    block = sch.get(rv)
    written = block.writes[0].source
    staged = sorted({r.source.name for r in block.reads if r.source.scope() in (GB, DDR)
                     and not r.source.same_as(written) and not read_in_place(block, r)})
    spilled_out = written.scope() != LB
    if not staged and not spilled_out:
        return
    depth = next((i for i, lp in enumerate(sch.get_loops(rv)) if _same(sch, lp, piece)), 0) + 1
    spatial, reduce = _chunk_loops(sch, rv, set(staged), spec, budget, spilled_out, depth)
    inner = ([*spatial, *reduce] or [piece])[-1]
    for bname in staged:
        copy = sch.cache_read(rv, _read_index(sch, rv, bname), LB)
        try_primitive(sch.compute_at, copy, inner, preserve_unit_loops=True)
    if spilled_out:
        write = sch.cache_write(rv, 0, LB)
        try_primitive(sch.reverse_compute_at, write, (spatial or [piece])[-1], preserve_unit_loops=True)


def _chunk_loops(sch: s_tir.Schedule, rv, staged: set[str], spec: DSASpec, budget: int,
                 spilled_out: bool, depth: int = 1) -> tuple[list, list]:
    """Tile an anchor below its first ``depth`` loops (the piece loop; section 4.1, Fig. 11): its
    two outermost spatial loops, and its outer reduction loop, get the tile sizes that minimise the
    time of the DMAs bringing the ``staged`` operands (promoted weights, spilled tensors) into LB
    per chunk - bytes at the GB rate of one core plus one DMA latency per transfer - while one
    chunk's buffers fit ``budget`` (the caller halves it for double buffering). Returns the split
    loops as ``(spatial, reduction)`` lists, moved right below the piece loop."""
    loops = _LoopNest(sch, rv, depth=depth, spec=spec)
    regions = [_Span(r) for r in loops.block.reads if r.source.name in staged]
    if spilled_out:
        regions += [_Span(w) for w in loops.block.writes]
    rate = spec.bytes_per_cycle("gb") / spec.cores_per_cluster

    def cost(tile: dict[str, int]):
        per_chunk = [r.bytes(loops.dom(tile)) for r in regions]
        if sum(per_chunk) > budget:
            return None
        chunks = math.prod(loops.extent[v] // tile[v] for v in loops.tiled)
        return chunks * (sum(per_chunk) / rate + len(per_chunk) * spec.dma_latency_cycles)

    return loops.split(loops.best(cost))


class _LoopNest:
    """The loops of block ``rv`` below its first ``depth`` loops, as a tiling problem: its
    ``outer`` outermost spatial loops (a GEMM's last two, in multiples of the matrix unit, and
    with ``batches`` its batch loops too) and its outer reduction loop are ``tiled``;
    :meth:`best` picks tile sizes by a cost, :meth:`split` applies them."""

    def __init__(self, sch: s_tir.Schedule, rv, depth: int, spec: DSASpec, batches: bool = False,
                 outer: int = 2):
        self.sch, self.rv, self.depth = sch, rv, depth
        realize = _realize(sch, rv)
        self.block = realize.block
        self.own = sch.get_loops(rv)[depth:]
        self.extent = {sch.get(lp).loop_var.name: int(sch.get(lp).extent) for lp in self.own}
        self.order = [sch.get(lp).loop_var.name for lp in self.own]
        self.feeds: dict[str, tuple[str, int]] = {}  # loop var -> (block var, iter type)
        for iv, value in zip(self.block.iter_vars, realize.iter_values):
            for var in vars_in(value):
                if var.name in self.extent:
                    self.feeds.setdefault(var.name, (iv.var.name, int(iv.iter_type)))
        spatial = [v for v in self.order if v in self.feeds and self.feeds[v][1] == 0
                   and self.extent[v] > 1]
        self.matrix = spec.matrix_shape if _gemm_like(self.block) else None
        conv = conv_operands(self.block) if self.matrix is None else None
        # A convolution the matrix unit can take: the instruction's shape and what its tiled
        # loops must be multiples of (rows, columns and reduction, :mod:`.intrinsics`).
        self.conv_shape = None if conv is None or conv_columns(conv.width, spec) is None else (
            spec.matrix_shape[0], conv_columns(conv.width, spec), spec.matrix_shape[2])
        self.conv_vars = {} if self.conv_shape is None else {
            conv.rows: self.conv_shape[0], conv.columns: self.conv_shape[1],
            conv.reduction: self.conv_shape[2]}
        # The block vars of the matrix unit's rows, columns and reduction, and its instruction.
        self.matrix_vars, self.instruction = None, None
        if self.conv_shape is not None:
            self.matrix_vars = tuple(conv_roles(conv)[r] for r in "ijk")
            self.instruction = self.conv_shape
        elif self.matrix is not None:
            found = gemm_vars(self.block)
            self.matrix_vars = None if found is None else tuple(found[r] for r in "ijk")
            self.instruction = self.matrix
        self.spatial_loops = len(spatial)
        if self.matrix is None:
            self.spatial = spatial[:outer]
        else:  # with ``batches`` a batched GEMM's batch loops too (else a tile holds all batches)
            self.spatial = spatial if batches else spatial[-2:]
        self.reduce = [v for v in self.order if v in self.feeds and self.feeds[v][1] == 2
                       and self.extent[v] > 1][:1]
        self.tiled = self.spatial + self.reduce

    def dom(self, tile: dict[str, int]) -> dict[str, int]:
        """Values each block var takes within one tile."""
        return {self.feeds[v][0]: tile.get(v, self.extent[v]) for v in self.order if v in self.feeds}

    def best(self, cost) -> dict[str, int]:
        """The tile of least ``cost(tile)`` (None: infeasible); if none is feasible, the
        smallest tile tried."""
        ranked = self.ranked(cost)
        if ranked:
            return ranked[0]
        return dict(zip(self.tiled, min(self.choices(), key=math.prod)))

    def choices(self) -> list[tuple[int, ...]]:
        """Tile sizes per tiled loop (:func:`tile_choices`); a GEMM's batch loops take any
        divisor, its last two spatial loops and its reduction multiples of the matrix unit."""
        shape = None
        if self.matrix is not None:
            gemm = self.matrix[max(0, 2 - len(self.spatial)):2]
            shape = ((1,) * (len(self.spatial) - len(gemm)) + tuple(gemm)
                     + tuple(self.matrix[2:][:len(self.reduce)]))
        elif self.conv_vars:
            shape = tuple(self.conv_multiple(v) for v in self.tiled)
        return tile_choices([self.extent[v] for v in self.tiled], shape)

    def conv_multiple(self, loop: str) -> int:
        """What the tile of ``loop`` must be a multiple of for the matrix unit to take a
        convolution (1 for loops it does not constrain)."""
        return self.conv_vars.get(self.feeds[loop][0], 1)

    def matrix_efficiency(self, tile: dict[str, int], spec: DSASpec) -> float:
        """The fraction of the matrix unit's work that the instructions covering one tile do
        (:func:`.partial_tiles.matrix_efficiency`; 0 for a block it cannot take)."""
        if self.matrix_vars is None:
            return 0.0
        dom = self.dom(tile)
        return matrix_efficiency([dom.get(v, 1) for v in self.matrix_vars], self.instruction,
                                 spec.matrix_shape)

    def ranked(self, cost) -> list[dict[str, int]]:
        """The feasible tiles (``cost`` not None), cheapest first."""
        return [item[-1] for item in self.scored(cost)]

    def scored(self, cost) -> list[tuple]:
        """``(cost, -tile elements, tile sizes, tile)`` of the feasible tiles, cheapest first."""
        scored = []
        for sizes in self.choices():
            tile = dict(zip(self.tiled, sizes))
            value = cost(tile)
            if value is not None:
                scored.append((value, -math.prod(sizes), sizes, tile))
        return sorted(scored, key=lambda item: item[:3])

    def split(self, tile: dict[str, int], keep_spatial: bool = False) -> tuple[list, list]:
        """Split the tiled loops by ``tile`` (spatial loops even when whole with
        ``keep_spatial``, leaving a unit outer loop); the outer parts go first, spatial then
        reduction."""
        sch = self.sch
        loops = {sch.get(lp).loop_var.name: lp for lp in self.own}
        outer = {v: sch.split(loops[v], [self.extent[v] // tile[v], tile[v]])[0]
                 for v in self.tiled if tile[v] < self.extent[v]
                 or (keep_spatial and v in self.spatial)}
        if not outer:
            return [], []
        first = list(outer.values())
        rest = [lp for lp in sch.get_loops(self.rv)[self.depth:] if not any(_same(sch, lp, o) for o in first)]
        sch.reorder(*first, *rest)
        return [outer[v] for v in self.spatial if v in outer], [outer[v] for v in self.reduce if v in outer]


def tile_choices(extents: list[int], matrix: tuple[int, ...] | None) -> list[tuple[int, ...]]:
    """Tile sizes per tiled loop: its divisors (multiples of the matrix unit's shape, ``matrix``
    with one entry per loop, where the extent has any; the others are partial tiles,
    :mod:`.partial_tiles`), at most :data:`MAX_MATRIX_TILE_OPTIONS` multiples of the matrix
    unit, else :data:`MAX_TILE_OPTIONS` divisors, spread from the smallest to the largest."""
    options, limits = [divisors(e) for e in extents], [MAX_TILE_OPTIONS] * len(extents)
    if matrix is not None:
        multiples = [[d for d in opts if d % m == 0] if m > 1 else [] for opts, m in zip(options, matrix)]
        limits = [MAX_MATRIX_TILE_OPTIONS if found else MAX_TILE_OPTIONS for found in multiples]
        options = [found or opts for found, opts in zip(multiples, options)]
    out = [()]
    for opts, limit in zip(options, limits):
        if len(opts) > limit:
            step = (len(opts) - 1) / (limit - 1)
            opts = sorted({opts[round(k * step)] for k in range(limit)})
        out = [t + (d,) for t in out for d in opts]
    return out


class _Span:
    """Bytes of a buffer region when each block var ``v`` takes ``dom[v]`` values (interval
    arithmetic on its index expressions), memoised per dimension and per domain of the vars the
    region reads. A dimension indexed by loaded values (a gather's table,
    :func:`~tvm_fusion_ext.analysis.primitive_types.indexed_by_data`) spans at most one row per
    combination of the block vars in its index."""

    def __init__(self, region):
        self.buffer = region.source
        self.dims = []
        for rng, extent in zip(region.region, region.source.shape):
            names = tuple(sorted({v.name: v for v in vars_in(rng.min)}.items()))
            self.dims.append((rng, int(extent), names))
        self.names = tuple(dict.fromkeys(n for _, _, names in self.dims for n, _ in names))
        self.elem_bytes = elem_bytes(self.buffer)
        self.gathered = indexed_by_data(region)
        self.memo: dict = {}
        self.totals: dict = {}
        self.analyzer = tvm.sym.Analyzer()

    def bytes(self, dom: dict[str, int]) -> int:
        key = tuple(dom.get(n, 0) for n in self.names)
        total = self.totals.get(key)
        if total is None:
            total = self.totals[key] = math.prod(
                self._extent(k, dom) for k in range(len(self.dims))) * self.elem_bytes
        return total

    def _extent(self, k: int, dom: dict[str, int]) -> int:
        """The elements dimension ``k`` spans over ``dom``."""
        rng, extent, names = self.dims[k]
        key = (k, tuple(dom.get(n, 0) for n, _ in names))
        if key not in self.memo and self.gathered:
            self.memo[key] = min(extent, math.prod(dom.get(n, 1) for n, _ in names))
        if key not in self.memo:
            sets = {var: tvm.sym.IntervalSet(tirx.const(0, str(var.ty.dtype)),
                                             tirx.const(dom[n] - 1, str(var.ty.dtype)))
                    for n, var in names if n in dom}
            bound = self.analyzer.int_set(rng.min, sets)
            span = int(bound.max_value) - int(bound.min_value) + int(rng.extent)
            self.memo[key] = min(extent, span)
        return self.memo[key]


def clipped_vars(block, region) -> frozenset[str]:
    """Block vars of ``block`` indexing an axis of its read ``region`` that leaves the buffer over
    the block's domain: a padding's halo (``A[v - 1]`` under a guard). None for a gather's table
    (indexed by loaded values, read in place)."""
    if indexed_by_data(region):
        return frozenset()
    analyzer = tvm.sym.Analyzer()
    for iv in block.iter_vars:
        analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(iv.dom.min, iv.dom.extent))
    clipped: set[str] = set()
    for rng, extent in zip(region.region, region.source.shape):
        bound = analyzer.const_int_bound(rng.min)
        if bound.min_value < 0 or bound.max_value + int(rng.extent) > int(extent):
            clipped |= {v.name for v in vars_in(rng.min)}
    return frozenset(clipped)


class _LayerReads:
    """The operands one layer's tile (:func:`_tile_layer`) reads from outside LB: which of them
    it stages in LB or reads in place (from GB or DDR, the unit stalling on the bytes), and the
    LB the staged copies take.

    A halo read (:func:`clipped_vars`) that the tile splits is staged as a copy TVM clips to the
    buffer with a ``T.where``, and ``CompactBufferAllocation`` (TVM
    ``src/s_tir/transform/compact_buffer_region.cc``) cannot bound the clipped extent: the copy
    is allocated at the whole axis (a padding's band of rows holds all the rows of its input).
    Gathers are read in place (:func:`.kernel_model.read_in_place`), and so is such a halo read of
    an element-wise layer where its copy does not fit LB: it reads each element once. A
    reduction would read it once per tap, so its operands are always staged."""

    def __init__(self, block):
        written = block.writes[0].source
        self.extents = {iv.var.name: int(iv.dom.extent) for iv in block.iter_vars}
        self.elementwise = not is_reduction(block)
        self.reads = [(_Span(r), r.source.scope(), clipped_vars(block, r)) for r in block.reads
                      if r.source.scope() != LB and not r.source.same_as(written)]
        self.gathers = {r.source.name for r in block.reads if read_in_place(block, r)}

    def allocated(self, dom: dict[str, int], in_place: set[str]) -> int:
        """LB bytes of the copies a tile giving each block var ``dom[var]`` values stages."""
        return sum(span.bytes({**dom, **{v: self.extents[v] for v in clipped if v in dom}})
                   for span, _, clipped in self.reads if span.buffer.name not in in_place)

    def in_place(self, dom: dict[str, int], out_bytes: int, double: bool, lb_bytes: int) -> set[str]:
        """Names of the operands a tile giving each block var ``dom[var]`` values reads in place."""
        if self.elementwise:
            split = {span.buffer.name for span, _, clipped in self.reads
                     if any(dom.get(v, self.extents[v]) < self.extents[v] for v in clipped)}
            if split and self.allocated(dom, self.gathers) * (2 if double else 1) + out_bytes > lb_bytes:
                return self.gathers | split
        return set(self.gathers)


def _gemm_like(block) -> bool:
    """A multiply-accumulate over exactly one reduction axis (what the matrix unit can take)."""
    body = block.body
    return (sum(iv.iter_type == 2 for iv in block.iter_vars) == 1
            and isinstance(body, tirx.BufferStore) and isinstance(body.value, tirx.Add)
            and any(isinstance(side, tirx.Mul) for side in (body.value.a, body.value.b)))


def stage_layers(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan,
                 instances: int = 1, stitch_runs: bool = False, windows: bool = True) -> tirx.PrimFunc:
    """:func:`_stage_layer_form`, and again with the layer outputs that form kept in LB (an
    epilogue's GEMM output, a stitched run's inner outputs) left out of the GB allocation, when
    the first spilled others to DDR: section 4.3 allocates GB among the tensors that leave LB,
    and which do is known only once the layers are tiled. The faster of the two that fit.
    With ``stitch_runs``, :class:`NothingStitched` when no run of layers stitches (the layers
    are then not tiled a second time: the result would be the form without ``stitch_runs``)."""
    first, levels = _stage_layer_form(func, spec, plan, instances, stitch_runs, windows)
    resident = frozenset(name for name, level in levels.items() if level == "lb")
    if not resident or "ddr" not in levels.values():
        return first
    again, _ = _stage_layer_form(func, spec, plan, instances, stitch_runs, windows, resident)
    models = [kernel_model(f) for f in (first, again)]
    ranked = sorted(zip(models, (first, again)), key=lambda item: (
        not fits(item[0], spec, reuse=True), kernel_cycles(item[0], spec)))
    return ranked[0][1]


def _stage_layer_form(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan,
                      instances: int = 1, stitch_runs: bool = False, windows: bool = True,
                      lb_resident: frozenset[str] = frozenset()) -> tuple[tirx.PrimFunc, dict[str, str]]:
    """The sub-graph with every layer bound to all cores (section 3.4's binding across the
    "other parallelizable dimensions"): inside an optional loop over ``instances`` of the plan's
    dimension (annotated ``dsa.instances``), each block is one phase tiled over the cores
    (:func:`_tile_layer`), its operands staged into LB per tile; layer outputs are exchanged
    through GB (Algorithm 4 sends an output to GB when producer and consumer bindings differ, as
    they do here), spilled to DDR by liveness when the live ones exceed GB (section 4.3).
    Weights are promoted to GB (:func:`_promote_anchor_weights`), and a GEMM's activation
    operands and a padding's input still in DDR are promoted per instance
    (:func:`_promote_activations`); with
    instruction scheduling the instance loop is double buffered, the next instance's promotions
    overlapping this one's layers (section 4.4). With buffer stitching (and ``stitch_runs``),
    runs of layers whose tensors Algorithm 4 leaves in LB share one tile loop instead
    (:func:`_stitch_groups`, :func:`_stage_stitched`); the layers' outputs exchanged through GB
    are written by section 3.5's copy ops and read by its redistribution ops (:data:`MOVEMENT`).

    The layers are staged one :class:`.layer_windows.LayerWindows` window at a time (the same
    function as staging them on the whole function, ``windows=False``, at a cost per layer that
    does not grow with the number of layers). The layer outputs named in ``lb_resident`` take no
    GB (:func:`_layer_scopes`): they are expected to stay in LB, and go to DDR if they do not.
    Returns the staged function and the level each layer output ended in; raises
    :class:`NothingStitched` when ``stitch_runs`` stitched no run (without ``lb_resident``)."""
    sch = _inlined_schedule(func)
    in_gb = gb_scoped_tensors(func, plan)
    gb_writers = {b.name_hint for b in leaf_blocks(sch.mod["main"])
                  if any(w.source.name in in_gb for w in b.writes)}
    params = {p.name for p in sch.mod["main"].params}
    depth = 0
    outer = None
    double = plan.options.instruction_scheduling
    if instances > 1:
        outputs = [rv for rv in _block_rvs(sch) if any(w.source.name in params
                                                        for w in sch.get(rv).writes)]
        anchor = _anchor_output(sch, outputs, plan.output_shape)
        loop = sch.get_loops(anchor)[plan.dim]
        extent = int(sch.get(loop).extent)
        if extent % instances:
            raise Unsupported(f"{instances} instances do not divide extent {extent}")
        outer, _ = sch.split(loop, [instances, extent // instances])
        if not _same(sch, outer, sch.get_loops(anchor)[0]):
            sch.reorder(outer, sch.get_loops(anchor)[0])
        for rv in reversed(_block_rvs(sch)):
            inside = sch.get(rv).same_as(sch.get(anchor)) or try_primitive(
                sch.compute_at, rv, outer, preserve_unit_loops=True) or try_primitive(
                sch.reverse_compute_at, rv, outer, preserve_unit_loops=True)
            if not inside:
                raise Unsupported(f"block {sch.get(rv).name_hint} stays outside the instances")
        sch.annotate(outer, INSTANCES, 1)
        sch.annotate(outer, DOUBLE_BUFFER, int(double))
        depth = 1
    before = {sch.get(rv).name_hint: sch.get(rv).writes[0].source.name for rv in _block_rvs(sch)}
    scopes, gb_peak = _layer_scopes(sch, spec, lb_resident)
    for name, scope in scopes.items():
        sch.set_scope(sch.get_sblock(name), 0, scope)
    layers = _block_rvs(sch)  # the promotions below stay outside the layers' tiles
    exchanged = frozenset(b.name for b in alloc_buffers(sch.mod["main"]))  # the layer outputs
    renamed = {sch.get(rv).writes[0].source.name: before[sch.get(rv).name_hint] for rv in layers
               if sch.get(rv).writes[0].source.name in exchanged}  # after set_scope -> before
    budget = _promote_anchor_weights(sch, params, spec.gb_bytes - gb_peak, depth, spec)
    if outer is not None:
        sch = _promote_activations(sch, layers, outer, budget, instances, double)
    groups = _stitch_groups(sch, layers, depth, gb_writers) if plan.options.stitch and stitch_runs else []
    groups = [[sch.get(rv).name_hint for rv in group] for group in groups]
    names = [sch.get(rv).name_hint for rv in layers]
    staged = LayerWindows(sch.mod["main"], None if outer is None else sch.get(outer).loop_var, windows)

    stitched_runs = []

    def stitched(trial, rvs, whole):
        whole_run = _stage_stitched(trial, rvs, spec, depth, double, exchanged, whole)
        if whole_run is not None:
            stitched_runs.append(rvs)
            return whole_run
        changed = None
        for runs in _windowed_runs(trial, rvs):
            for run in runs:  # the longest first
                found = _stage_stitched(changed or trial, run, spec, depth, double, exchanged,
                                        whole, halo=True)
                if found is not None:
                    stitched_runs.append(run)
                    changed = found
                    break
        return changed

    def tiled(trial, rvs, whole):
        if len(trial.get_loops(rvs[0])) > depth and not _tiled(trial, rvs[0]):
            return _tile_layer(trial, rvs[0], spec, depth, double, plan.options.stitch, exchanged, whole)
        return None

    for group in groups:
        staged.stage(group, stitched)
    if stitch_runs and not stitched_runs and not lb_resident:
        raise NothingStitched(f"none of {len(groups)} runs of layers stitches")
    for name in names:
        staged.stage([name], tiled)
    # A layer output moved to LB (set_scope) is renamed; one still under its name left LB.
    kept = {b.name: level_of(b.scope()) for b in alloc_buffers(staged.func)}
    levels = {original: kept.get(name, "lb") for name, original in renamed.items()}
    loop_var = None if outer is None else sch.get(outer).loop_var
    return _promote_per_cluster(_tensorize(staged.func, spec, loop_var, windows), spec, double), levels


def gb_scoped_tensors(func: tirx.PrimFunc, plan: SubgraphPlan) -> set[str]:
    """Names of the intermediates of ``func`` that Algorithm 4 puts in GB (``plan.tensor_scopes``:
    a chain's sub-graph outputs whose consumers are bound differently, section 3.4 lines 11-12).
    ``FuseTIR`` (TVM ``src/relax/transform/fuse_tir.cc``) allocates the output of every op but
    the kernel's last as ``<output name>_intermediate``, in op order; an entry whose op's buffer
    does not have the recorded shape is left to the generator (LB where it can stitch)."""
    allocated = set(alloc_buffers(func))
    outputs = []
    for leaf in leaf_blocks(func):
        for region in leaf.writes:
            buf = region.source
            if FUSED_OUTPUT_TAG in buf.name and buf in allocated and buf not in outputs:
                outputs.append(buf)
    return {outputs[position].name for position, shape, scope in plan.tensor_scopes
            if scope == "GB" and position < len(outputs)
            and tuple(int(d) for d in outputs[position].shape) == tuple(shape)}


def _stitch_groups(sch: s_tir.Schedule, layers: list, depth: int, gb_writers: set[str]) -> list[list]:
    """Buffer stitching across the layers of the layer-bound form (section 4.2, Fig. 10): runs of
    consecutive layers, each the only consumer of the one before and reading it in place of a
    staged slice, where the tensor between them is an intermediate Algorithm 4 leaves in LB (its
    writer not among ``gb_writers``). Runs of two or more layers are returned;
    :func:`_stage_stitched` runs each in one tile loop."""
    params = {p.name for p in sch.mod["main"].params}
    runs: list[list] = []
    for rv in layers:
        if len(sch.get_loops(rv)) <= depth:
            runs.append([])
            continue
        if runs and runs[-1] and _feeds_only(sch, runs[-1][-1], rv, params, gb_writers):
            runs[-1].append(rv)
        else:
            runs.append([rv])
    return [run for run in runs if len(run) > 1]


def _windowed_runs(sch: s_tir.Schedule, run: list) -> list[list[list]]:
    """The shorter runs tried where a run of :func:`_stitch_groups` does not stitch whole: a
    windowed reduction without a contraction (:func:`windows_only`: a depthwise convolution, a
    pooling) with the element-wise layer feeding it (its padding, with the previous layer's
    epilogue inlined), and with the element-wise layer after it where there is one (its own
    epilogue), longest first. Stitched (tiled along its outermost loop, the channels within an
    image), its padded input lives in LB a few channels at a time and never takes GB (section
    4.2, Fig. 10)."""
    found = []
    for k in range(1, len(run)):
        producer, reduction = sch.get(run[k - 1]), sch.get(run[k])
        if is_reduction(producer) or not windows_only(reduction, producer):
            continue
        if any(run[k - 1] in r for runs in found for r in runs):
            continue
        after = run[k + 1] if k + 1 < len(run) and not is_reduction(sch.get(run[k + 1])) else None
        found.append(([[run[k - 1], run[k], after]] if after is not None else [])
                     + [[run[k - 1], run[k]]])
    return found


def windows_only(consumer, producer) -> bool:
    """Whether reduction ``consumer`` reads ``producer``'s output along windows only: every
    index moves with a spatial variable (a depthwise convolution or a pooling), so a tile of the
    consumer needs a band of the producer's rows, not all of it (a convolution's input channel,
    indexed by a reduction variable alone, is a contraction over the whole axis)."""
    if not is_reduction(consumer):
        return False
    written = producer.writes[0].source
    spatial = {iv.var.name for iv in consumer.iter_vars if iv.iter_type == 0}
    regions = [r for r in consumer.reads if r.source.same_as(written)]
    return bool(regions) and all(any(v.name in spatial for v in vars_in(rng.min))
                                 for r in regions for rng in r.region)


def _feeds_only(sch: s_tir.Schedule, producer, consumer, params: set[str], gb_writers: set[str]) -> bool:
    """Whether ``producer``'s output may stay in LB for ``consumer`` (:func:`_stitch_groups`)."""
    out = sch.get(producer).writes[0].source
    if out.name in params or sch.get(producer).name_hint in gb_writers:
        return False
    consumers = sch.get_consumers(producer)
    if len(consumers) != 1 or not _same(sch, consumers[0], consumer):
        return False
    block = sch.get(consumer)
    return not any(read_in_place(block, r) for r in block.reads if r.source.same_as(out))


def _stage_stitched(sch: s_tir.Schedule, group: list, spec: DSASpec, depth: int, double: bool,
                    exchanged: frozenset, whole: bool = True, halo: bool = False
                    ) -> s_tir.Schedule | None:
    """One run of :func:`_stitch_groups` as one phase: the last layer tiled along its outermost
    spatial loop only (Algorithm 4's plain binding: cores along the outer dimension, the others
    whole), every earlier layer ``compute_at`` into that tile loop with its output in LB, their
    operands staged into LB per tile (an anchor's per chunk, :func:`_stage_anchor_operands`).
    The tiles tried are the cheapest :data:`MAX_STITCH_TRIALS` of the last layer's cost (half of
    them with matrix-unit-shaped rows when a GEMM is in the run); a tile is kept when no layer of
    the run is recomputed (the layers' bindings match: each tile needs only its own slice of
    every tensor of the run) and the tile loop fits LB; the one with the fewest simulated cycles
    wins if it beats the layers tiled on their own (:func:`_unstitched_cycles`), else None.
    ``whole``: whether ``sch`` holds the whole function (:func:`_tile_layer`).

    With ``halo`` (a windowed run, :func:`_windowed_runs`) the element-wise layers read their
    inputs' halo in place (:func:`_stage_member_operands`)."""
    last = group[-1]
    loops = _LoopNest(sch, last, depth, spec, batches=True, outer=1)
    if not loops.spatial:
        return None
    cost = _layer_cost(loops, spec, double)
    # Half the trials keep a GEMM of the run on matrix-unit-shaped rows, half use every core.
    rows = spec.matrix_shape[0] if spec.matrix_shape is not None and any(
        _gemm_like(sch.get(rv)) for rv in group[:-1]) else 1

    def rows_only(tile: dict[str, int]):
        if any(tile[v] != loops.extent[v] for v in loops.spatial[1:]):
            return None
        return cost(tile)

    ranked = loops.ranked(rows_only)
    shaped = [t for t in ranked if t[loops.spatial[0]] % rows == 0]
    half = MAX_STITCH_TRIALS // 2
    ranked = shaped[:half] + [t for t in ranked if t not in shaped[:half]]
    domain = {sch.get(rv).name_hint: _iterations(sch, rv) for rv in group[:-1]}
    budget = spec.lb_bytes // WEIGHT_BUFFER_FRACTION
    best = None
    for tile in ranked[:MAX_STITCH_TRIALS]:
        trial = sch.copy()
        for rv in group[:-1]:
            trial.set_scope(rv, 0, LB)
        try:
            tile_loop = _stage_layer_tile(trial, last, spec, depth, double, tile, 1,
                                          exchanged=exchanged)
        except (Unsupported, s_tir.ScheduleError, RuntimeError):
            continue
        if tile_loop is None or not all(try_primitive(trial.compute_at, rv, tile_loop,
                                                      preserve_unit_loops=True)
                                        for rv in reversed(group[:-1])):
            continue
        if any(_iterations(trial, rv) != domain[trial.get(rv).name_hint] for rv in group[:-1]):
            continue  # a layer recomputed per tile: the bindings do not match
        try:
            for rv in group[:-1]:
                _stage_member_operands(trial, rv, spec, tile_loop, budget, halo)
            model = kernel_model(enclosing_only(trial.mod["main"], trial.get(tile_loop)))
        except (s_tir.ScheduleError, RuntimeError, ValueError, TypeError):
            continue  # a staged region with symbolic bounds (a reshape across the tile rows)
        if model["footprint"]["lb_live_double_buffered" if double else "lb_live"] > spec.lb_bytes:
            continue
        cycles = kernel_cycles(model, spec) - spec.launch_cycles  # the tile loop's phase alone
        if best is None or cycles < best[0]:
            best = (cycles, trial)
    if best is None or best[0] >= _unstitched_cycles(sch, group, spec, depth, double, exchanged, whole):
        return None
    return best[1]


def _unstitched_cycles(sch: s_tir.Schedule, group: list, spec: DSASpec, depth: int, double: bool,
                       exchanged: frozenset, whole: bool = True) -> float:
    """Simulated cycles of the layers of ``group`` each tiled on its own (:func:`_tile_layer`,
    outputs exchanged through GB), what stitching them must beat."""
    trial = sch.copy()
    for rv in group:
        if not _tiled(trial, rv):
            try:
                trial = _tile_layer(trial, rv, spec, depth, double, True, exchanged, whole)
            except Unsupported:
                return math.inf
    loops = {}
    for rv in group:
        tile_loop = next((lp for lp in trial.get_loops(rv)
                          if TILE in dict(trial.get(lp).annotations or {})), None)
        if tile_loop is None:
            return math.inf
        loops[trial.get_sref(tile_loop)] = tile_loop
    func = trial.mod["main"]
    try:
        return sum(kernel_cycles(kernel_model(enclosing_only(func, trial.get(lp))), spec)
                   - spec.launch_cycles for lp in loops.values())
    except (ValueError, TypeError):  # symbolic regions: not comparable, keep the layers apart
        return -math.inf


def _iterations(sch: s_tir.Schedule, rv) -> int | None:
    """Iterations of block ``rv`` over all its loops (None when an extent is not constant)."""
    extents = [sch.get(lp).extent for lp in sch.get_loops(rv)]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    return math.prod(int(e) for e in extents)


def _stage_member_operands(sch: s_tir.Schedule, rv, spec: DSASpec, tile_loop, budget: int,
                           halo: bool = False) -> None:
    """A stitched layer's operands outside LB into LB: an anchor's per chunk
    (:func:`_stage_anchor_operands`), an element-wise layer's per tile; with ``halo`` an
    element-wise layer reads a halo region (:func:`clipped_vars`) in place, each element once
    (its staged copy would be allocated at the whole axis, :class:`_LayerReads`)."""
    block = sch.get(rv)
    if is_reduction(block):
        _stage_anchor_operands(sch, rv, spec, tile_loop, budget)
        return
    written = block.writes[0].source
    for region in block.reads:
        if halo and clipped_vars(block, region):
            continue
        if region.source.scope() != LB and not region.source.same_as(written) \
                and not read_in_place(block, region):
            copy = sch.cache_read(rv, _read_index(sch, rv, region.source.name), LB, consumer_blocks=[rv])
            sch.compute_at(copy, tile_loop, preserve_unit_loops=True)


def _promote_anchor_weights(sch, params: set[str], budget: int, depth: int,
                            spec: DSASpec) -> int:
    """Weight promotion in the layer-bound form (section 4.1): the parameters an anchor reads
    whole in every instance (its tiles read them again and again) are copied DDR -> GB once
    before the instances, in order of use while they fit ``budget``. A weight larger than that
    is split across the clusters' GBs along the output dimension its anchor indexes
    (:func:`_slice_dim`), each cluster promoting and reading only its slice, when one slice fits.
    Returns the GB budget left."""
    by_name = realizes(sch.mod["main"])
    for pname, names in _param_readers(by_name, params).items():
        block = sch.get_sblock(names[0])
        index = _read_index(sch, block, pname)
        buf = sch.get(block).reads[index].source
        if not is_reduction(by_name[names[0]].block):
            continue
        if depth and any(_depends_on(by_name[n], pname, sch.get(sch.get_loops(sch.get_sblock(n))[0]).loop_var)
                         for n in names):
            continue  # an activation: each instance reads its own slice
        size = buffer_bytes(buf)
        if size <= budget:
            budget -= size
            sch.cache_read(block, index, GB)
            continue
        dim = _slice_dim(by_name[names[0]].block, pname, spec.clusters)
        slice_bytes = size // spec.clusters
        if dim is None or len(names) > 1 or slice_bytes > budget or buf.dtype.bits > 32:
            continue
        budget -= slice_bytes
        copy = sch.cache_read(block, index, sliced_scope(spec.clusters))
        loops = sch.get_loops(copy)
        part, _ = sch.split(loops[dim], [spec.clusters, int(buf.shape[dim]) // spec.clusters])
        sch.reorder(part, *[lp for lp in sch.get_loops(copy) if not _same(sch, lp, part)])
        sch.annotate(part, TILE, 1)
        sch.annotate(part, CORES, spec.clusters)
        sch.annotate(part, DOUBLE_BUFFER, 0)
    return budget


def _slice_dim(block, name: str, clusters: int) -> int | None:
    """The dimension of weight ``name`` to split across ``clusters``: the last one the anchor
    ``block`` indexes with a spatial variable (a GEMM weight's output columns), if ``clusters``
    divides it."""
    spatial = {iv.var.name for iv in block.iter_vars if iv.iter_type == 0}
    region = next(r for r in block.reads if r.source.name == name)
    dims = [d for d, rng in enumerate(region.region)
            if any(v.name in spatial for v in vars_in(rng.min))
            and int(region.source.shape[d]) % clusters == 0]
    return dims[-1] if dims else None


def _promote_activations(sch: s_tir.Schedule, layers: list, outer, budget: int,
                         instances: int, double: bool) -> s_tir.Schedule:
    """Activation promotion per instance (sections 3.3 and 4.1): the operands still in DDR
    (inputs, spilled layer outputs) that move with the instance, of a GEMM-shaped layer or read
    at a padding's halo (:func:`clipped_vars`: a tile that splits the halo reads them in place,
    the unit stalling on DDR), are copied DDR -> GB at the start of each instance, while one
    instance's slices (twice that with the instance loop double buffered) fit ``budget``; every
    cluster fills its own GB with them (:func:`_promote_per_cluster`). Returns the schedule (a
    copy when a promotion was applied)."""
    instance_var = sch.get(outer).loop_var
    for rv in layers:
        realize = _realize(sch, rv)
        gemm = _gemm_like(realize.block)
        written = realize.block.writes[0].source
        for region in realize.block.reads:
            buf = region.source
            if _level(buf.scope()) != "ddr" or buf.same_as(written) or read_in_place(realize.block, region) \
                    or not _depends_on(realize, buf.name, instance_var) \
                    or not (gemm or clipped_vars(realize.block, region)):
                continue
            size = buffer_bytes(buf) // instances * (2 if double else 1)
            if size > budget:
                continue
            trial = sch.copy()
            copy = trial.cache_read(rv, _read_index(trial, rv, buf.name), GB, consumer_blocks=[rv])
            if try_primitive(trial.compute_at, copy, outer, preserve_unit_loops=True):
                sch, budget = trial, budget - size
    return sch


def _layer_scopes(sch, spec: DSASpec, lb_resident: frozenset[str] = frozenset()
                  ) -> tuple[dict[str, str], int]:
    """Scope of each layer output but those in ``lb_resident`` (by the block writing it): GB, or
    DDR for the longest-lived ones when the live ones exceed GB (section 4.3 with LB out of the
    picture); and the live peak of those in GB."""
    compacted = compact_buffers(sch.mod["main"])
    leaves = leaf_blocks(compacted)
    allocated = {b.name: buffer_bytes(b) for b in alloc_buffers(compacted)}
    first, last = live_ranges(leaves)
    writer = {}
    for leaf in leaves:
        for region in leaf.writes:
            writer.setdefault(region.source.name, leaf.name_hint)
    tensors = [Tensor(n, size, first.get(n, 0), last.get(n, 0)) for n, size in allocated.items()
               if n in writer and n not in lb_resident]
    placed = allocate(tensors, len(leaves), 0, spec.gb_bytes)
    peak = live_peak(tensors, placed.level, len(leaves), "GB")
    return {writer[n]: GB if level == "GB" else DDR for n, level in placed.level.items()}, peak


def _tile_layer(sch: s_tir.Schedule, rv, spec: DSASpec, depth: int, double: bool,
                stitch: bool = False, exchanged: frozenset = frozenset(),
                whole: bool = True) -> s_tir.Schedule:
    """One layer as one phase: its outer spatial loops (all of a batched GEMM's; more than two
    where one row of the inner ones exceeds LB) tiled and fused
    into a loop over tiles bound to every core, its reduction chunked, every operand outside LB
    staged per chunk and its output written back per tile. Tile sizes minimise the phase's cycles
    as the simulator counts them (loads, MACs on the unit the block uses - the matrix unit for
    GEMM-shaped tiles -, stores; double buffering) among those whose buffers fit LB. The
    estimate's regions are exact per block variable, but the buffers TVM allocates are bounded
    through the fused tile loop (a reshape's ``(t * 32 + i) // 128`` spans two rows to it), so
    the cheapest :data:`MAX_LAYER_TILE_TRIALS` tiles are staged on copies of ``sch`` and the first
    whose allocated LB fits is returned; :class:`Unsupported` if none does. A concatenation
    (:func:`_concatenates`) keeps the fitting trial the simulator finds fastest instead: a tile
    of part of the concatenated axis reads every input's whole slice (TVM's regions are not
    narrowed by the select), which the estimate's exact regions do not see. With buffer
    stitching (``stitch``) a GEMM's epilogue runs in its tile (:func:`_epilogue`) where that
    still fits. A tile whose write-back stays outside its tile loop is checked on the kernel
    model of the whole function: on a window (``whole`` false) that raises
    :class:`.layer_windows.WindowTooSmall`."""
    loops = _LoopNest(sch, rv, depth, spec, batches=True)
    if not loops.spatial:
        return sch
    ranked = _ranked_layer_tiles(sch, rv, spec, depth, double, loops)
    epilogue = _epilogue(sch, rv) if stitch and loops.matrix is not None else None
    compare = _concatenates(loops.block)
    fastest = None
    for outer, tile in ranked[:MAX_LAYER_TILE_TRIALS]:
        for fused in ([epilogue, None] if epilogue is not None else [None]):
            trial = sch.copy()
            tile_loop = _stage_layer_tile(trial, rv, spec, depth, double, tile, outer, fused,
                                          exchanged)
            # When this layer's LB buffers are all touched inside its tile loop only, no other LB
            # buffer lives across that loop (each layer's are its own), so the kernel's LB peak
            # fits iff this loop's does (the other layers' fitted when they were staged).
            func = trial.mod["main"]
            if tile_loop is None and not whole:
                raise WindowTooSmall(f"layer {loops.block.name_hint}: the write-back stays outside its tile")
            try:
                model = kernel_model(func if tile_loop is None else
                                     enclosing_only(func, trial.get(tile_loop)))
            except ValueError:  # a staged region the model cannot size (symbolic extent)
                continue
            if model["footprint"]["lb_live_double_buffered" if double else "lb_live"] > spec.lb_bytes:
                continue
            if not compare:
                return trial
            cycles = kernel_cycles(model, spec)
            if fastest is None or cycles < fastest[0]:
                fastest = (cycles, trial)
    if fastest is not None:
        return fastest[1]
    raise Unsupported(f"no tile of layer {loops.block.name_hint} fits LB")


def _ranked_layer_tiles(sch: s_tir.Schedule, rv, spec: DSASpec, depth: int, double: bool,
                        loops: _LoopNest) -> list[tuple[int, dict[str, int]]]:
    """The feasible tiles of :func:`_tile_layer`, cheapest first by :func:`_layer_cost`, each with
    the number of outer spatial loops it tiles. Besides a conv's or element-wise layer's two
    outermost spatial loops (images, channels) its rows are tiled too (section 4.1's tiling of an
    anchor): a tile of whole feature maps holds few channels in LB, and every tile along the
    channels loads the whole input again; a band of rows (its halo included) lets one tile hold
    more channels. Further spatial loops are tiled only while no tile fits LB, or for a
    concatenation (:func:`_concatenates`): its tile loads every input's slice of the concatenated
    axis (TVM's regions are not narrowed by the select), so only a tile of the whole axis loads
    each input once, and such a tile fits LB with fewer rows and columns."""
    key = (tvm_ffi.structural_hash(loops.block), tuple(
        (v, loops.extent[v], loops.feeds.get(v)) for v in loops.order), double, spec)
    if key in _RANKED_TILES:
        return _RANKED_TILES[key]
    ranked: list[tuple[float, int, int, dict[str, int]]] = []
    outer = len(loops.spatial)
    while True:
        ranked += [(value, size, outer, tile) for value, size, _, tile in
                   loops.scored(_layer_cost(loops, spec, double))]
        if loops.matrix is not None or outer >= loops.spatial_loops or (
                ranked and outer >= ROW_TILED_LOOPS and not _concatenates(loops.block)):
            break
        outer += 1
        loops = _LoopNest(sch, rv, depth, spec, outer=outer)
    ranked.sort(key=lambda item: item[:3])
    _RANKED_TILES[key] = [(outer, tile) for _, _, outer, tile in ranked]
    return _RANKED_TILES[key]


def _concatenates(block: s_tir.SBlock) -> bool:
    """Whether ``block`` picks each element from one of two inputs by its position
    (:func:`.kernel_model.index_select` with a load in both branches; a padding's other branch is
    a constant): a concatenation, possibly with element-wise ops inlined."""
    selects: list = []
    tvm_ffi.structural_walk(block.body, [(tvm.ir.Call, selects.append), (tirx.Select, selects.append)])
    for expr in selects:
        branches = index_select(expr)
        if branches is not None and all(loaded_buffers(branch) for branch in branches):
            return True
    return False


def _tiled(sch: s_tir.Schedule, rv) -> bool:
    """Whether block ``rv`` already runs inside a tile loop (an epilogue fused into its GEMM)."""
    return any(TILE in dict(sch.get(lp).annotations or {}) for lp in sch.get_loops(rv))


def _epilogue(sch: s_tir.Schedule, rv):
    """The element-wise layer that alone consumes GEMM ``rv``'s layer output (bias, activation,
    residual add: section 4.1's loop fusion around an anchor), or None."""
    written = sch.get(rv).writes[0].source
    if written.name in {p.name for p in sch.mod["main"].params}:
        return None
    consumers = sch.get_consumers(rv)
    if len(consumers) != 1 or is_reduction(sch.get(consumers[0])):
        return None
    return consumers[0]


def _layer_cost(loops: _LoopNest, spec: DSASpec, double: bool):
    """Simulated cycles of the phase of :func:`_tile_layer` per tile size (None: its buffers
    do not fit LB)."""
    block = loops.block
    operands = _LayerReads(block)
    out = _Span(block.writes[0])
    out_level = _level(block.writes[0].source.scope())
    iterations = math.prod(loops.extent.values())
    lat = spec.dma_latency_cycles
    unit = spec.unit_for("vmac" if is_reduction(block) else "vector")
    matrix = spec.unit_for("matrix") if loops.matrix_vars is not None else unit

    levels = [_level(scope) for _, scope, _ in operands.reads]

    def transfer(nbytes: dict[str, int], active: int) -> Fraction:
        """Cycles to move ``nbytes[level]`` bytes from DDR and GB with ``active`` cores sharing
        DDR's bandwidth and a cluster's cores sharing their GB's (``spec.bytes_per_cycle``, exact)."""
        return (Fraction(nbytes.get("ddr", 0) * spec.clock_hz * active, spec.ddr_bandwidth)
                + Fraction(nbytes.get("gb", 0) * spec.clock_hz * min(active, spec.cores_per_cluster),
                           spec.gb_bandwidth))

    sliced = _sliced_loops(loops)

    def cost(tile: dict[str, int]):
        if any((loops.extent[v] // tile[v]) % k for v, k in sliced.items()):
            return None  # each cluster's tiles read one slice of a sliced weight
        dom = loops.dom(tile)
        out_bytes = out.bytes(dom)
        in_place = operands.in_place(dom, out_bytes, double, spec.lb_bytes)
        # bytes per level DMA'd into LB per chunk (``loads`` copies) / read in place by the unit
        staged, direct, loads = {"ddr": 0, "gb": 0}, {"ddr": 0, "gb": 0}, 0
        for (span, _, _), level in zip(operands.reads, levels):
            if span.buffer.name in in_place:
                direct[level] += span.bytes(dom)
            else:
                staged[level] += span.bytes(dom)
                loads += 1
        if operands.allocated(dom, in_place) * (2 if double else 1) + out_bytes > spec.lb_bytes:
            return None
        tiles = math.prod(loops.extent[v] // tile[v] for v in loops.spatial)
        chunks = math.prod(loops.extent[v] // tile[v] for v in loops.reduce)
        active = min(tiles, spec.num_cores)
        per_core = math.ceil(tiles / spec.num_cores)
        load = chunks * (transfer(staged, active) + lat * loads)
        stall = chunks * transfer(direct, active)
        store = transfer({out_level: out_bytes}, active) + lat
        ops_per_cycle = max(unit.ops_per_cycle, matrix.ops_per_cycle * loops.matrix_efficiency(tile, spec))
        compute = iterations / tiles / ops_per_cycle + stall
        if double:  # the chunks, then the tiles, pipelined (simulator._pipelined_tile)
            tile = (load + compute) / chunks + (chunks - 1) * max(load, compute) / chunks + store
            return tile + (per_core - 1) * max(load, compute, store)
        return per_core * (load + compute + store)

    return cost


def _stage_layer_tile(sch: s_tir.Schedule, rv, spec: DSASpec, depth: int, double: bool,
                      tile: dict[str, int], outer: int, epilogue=None,
                      exchanged: frozenset = frozenset()):
    """Apply one tile of :func:`_tile_layer` (over ``outer`` spatial loops) to ``sch``; an
    ``epilogue`` (:func:`_epilogue`) runs in the same tile on the GEMM's output kept in LB, and
    only the epilogue's output is written back. Loads of the layer outputs named in ``exchanged``
    (produced under another layer's tiling) are section 3.5's redistribution ops, the write-back
    of one a copy op (annotated :data:`MOVEMENT`). Returns the tile loop, or None when the write-back
    could not move into it (its LB buffer is then touched outside the loop too)."""
    loops = _LoopNest(sch, rv, depth, spec, batches=True, outer=outer)
    block = loops.block
    dom = loops.dom(tile)
    operands = _LayerReads(block)
    in_place = operands.in_place(dom, _Span(block.writes[0]).bytes(dom), double, spec.lb_bytes)
    staged = sorted({span.buffer.name for span, _, _ in operands.reads} - in_place)
    spatial, reduce = loops.split(tile, keep_spatial=True)
    for var, slices in _sliced_loops(loops).items():  # one cluster's tiles first, then the next's
        k = loops.spatial.index(var)
        part, rest = sch.split(spatial[k], [slices, None])
        if k:
            sch.reorder(part, *spatial[:k])
        spatial = [part, *spatial[:k], rest, *spatial[k + 1:]]
    tile_loop = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    inner = (reduce or [tile_loop])[-1]
    for name in staged:
        copy = sch.cache_read(rv, _read_index(sch, rv, name), LB, consumer_blocks=[rv])
        if not try_primitive(sch.compute_at, copy, inner, preserve_unit_loops=True):
            raise Unsupported(f"operand {name} of {block.name_hint} cannot be staged per tile")
        if name in exchanged:  # another layer's output, tiled by that layer's loop
            sch.annotate(copy, MOVEMENT, "redistribute")
    if epilogue is not None and try_primitive(sch.reverse_compute_at, epilogue, tile_loop,
                                     preserve_unit_loops=True):
        sch.set_scope(rv, 0, LB)
        epilogue_block = sch.get(epilogue)
        written = epilogue_block.writes[0].source
        for region in epilogue_block.reads:
            if region.source.scope() != LB and not region.source.same_as(written) \
                    and not read_in_place(epilogue_block, region):
                copy = sch.cache_read(epilogue, _read_index(sch, epilogue, region.source.name), LB,
                                      consumer_blocks=[epilogue])
                sch.compute_at(copy, tile_loop, preserve_unit_loops=True)
                if region.source.name in exchanged:
                    sch.annotate(copy, MOVEMENT, "redistribute")
        rv = epilogue
    write = sch.cache_write(rv, 0, LB)
    if sch.get(write).writes[0].source.name in exchanged:  # the tile's LB slice -> GB
        sch.annotate(write, MOVEMENT, "copy")
    inside = try_primitive(sch.reverse_compute_at, write, tile_loop, preserve_unit_loops=True)
    sch.annotate(tile_loop, TILE, 1)
    sch.annotate(tile_loop, CORES, spec.num_cores)
    sch.annotate(tile_loop, DOUBLE_BUFFER, int(double))
    return tile_loop if inside else None


def _sliced_loops(loops: _LoopNest) -> dict[str, int]:
    """Tiled spatial loops of ``loops.block`` that index a weight sliced across clusters
    (:func:`_promote_anchor_weights`), with the number of slices."""
    out = {}
    for region in loops.block.reads:
        slices = gb_slices(region.source.scope())
        dim = _slice_dim(loops.block, region.source.name, slices) if slices > 1 else None
        if dim is None:
            continue
        names = {v.name for v in vars_in(region.region[dim].min)}
        out.update({v: slices for v in loops.spatial if loops.feeds[v][0] in names})
    return out


def _level(scope: str) -> str:
    """``gb`` for a GB scope (sliced or not), else ``ddr`` (what an LB-staged operand is read from)."""
    return "gb" if level_of(scope) == "gb" else "ddr"


def _promote_per_cluster(func: tirx.PrimFunc, spec: DSASpec, ahead: bool = False) -> tirx.PrimFunc:
    """Wrap the promotions (DDR -> GB copies) in loops over the clusters, annotated ``dsa.tile``
    on ``clusters`` cores: every cluster fills its own GB (the copies are idempotent on the host),
    and the simulator charges each cluster's DDR traffic. The weight promotions at the root go
    first, in one loop, double buffered with ``ahead`` (section 4.4's instruction scheduling:
    each is issued ahead of the layers and hides behind those before its first use,
    :mod:`.kernel_model`); those inside an instance loop stay where they are."""
    root = func.body.block
    stmts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    promote = [s for s in stmts if _is_promotion(s)]
    rest = [_promote_in_instances(s, spec) for s in stmts if not _is_promotion(s)]
    if not promote and all(a.same_as(b) for a, b in zip(rest, stmts)):
        return func
    if promote:
        rest.insert(0, _cluster_loop(promote, spec, ahead))
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                            tirx.SeqStmt(rest) if len(rest) > 1 else rest[0], root.init,
                            root.alloc_buffers, root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(func.body.iter_values, func.body.predicate, new_root))


def _cluster_loop(stmts: list, spec: DSASpec, ahead: bool = False) -> tirx.For:
    return tirx.For(tvm.ir.Var(CLUSTER_LOOP, "int32"), 0, spec.clusters, tirx.ForKind.SERIAL,
                    tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0],
                    annotations={TILE: 1, CORES: spec.clusters, DOUBLE_BUFFER: int(ahead)})


def _promote_in_instances(stmt, spec: DSASpec):
    """``stmt`` with each run of promotions in a ``dsa.instances`` loop's body wrapped in place."""
    if not (isinstance(stmt, tirx.For) and INSTANCES in dict(stmt.annotations or {})
            and isinstance(stmt.body, tirx.SeqStmt)):
        return stmt
    body, run = [], []
    for child in [*stmt.body.seq, None]:
        if child is not None and _is_promotion(child):
            run.append(child)
            continue
        if run:
            body.append(_cluster_loop(run, spec))
            run = []
        if child is not None:
            body.append(child)
    if len(body) == len(stmt.body.seq) and all(a.same_as(b) for a, b in zip(body, stmt.body.seq)):
        return stmt
    return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, tirx.SeqStmt(body),
                    stmt.thread_binding, stmt.annotations, stmt.step)


def _is_promotion(stmt) -> bool:
    blocks: list = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, blocks.append)])
    return bool(blocks) and all(b.writes and b.writes[0].source.scope() == GB
                                and b.name_hint.endswith("_global.dsa_gb") for b in blocks)


def unique_buffer_names(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every allocated buffer named uniquely (``FuseTIR`` may give several the same
    name; cache stages are named after their buffer, and the spill plan refers to buffers by name):
    duplicates get a ``_<k>`` suffix."""
    seen = {p.name for p in func.params}
    renamed = {}
    for buf in alloc_buffers(func):
        name, k = buf.name, 1
        while name in seen:
            name, k = f"{buf.name}_{k}", k + 1
        seen.add(name)
        if name != buf.name:
            renamed[buf] = tvm.ir.Var(name, buf.ty)
    if not renamed:
        return func
    return tvm_ffi.structural_map(func, [(tvm.ir.Var, lambda v: renamed.get(v, v))])


def _inlined_schedule(func: tirx.PrimFunc) -> s_tir.Schedule:
    """A schedule of ``func`` after :func:`_inline_elementwise`, the inlined function memoised
    per function: every candidate of a sub-graph (pieces per split, layers per instance count)
    starts from it, and inlining costs a schedule primitive over the whole function per op."""
    key = tvm_ffi.structural_hash(func)
    hit = _INLINED.get(key)
    if hit is None or not tvm_ffi.structural_equal(hit[0], func):
        sch = new_schedule(func)
        _inline_elementwise(sch)
        hit = _INLINED[key] = (func, sch.mod["main"])
    return new_schedule(hit[1])


def _inline_elementwise(sch: s_tir.Schedule) -> None:
    """Inline element-wise / injective intermediates into element-wise consumers only: a layer's
    epilogue (bias, batch norm, ReLU, residual add, the next layer's padding) becomes one loop
    nest, and nothing is recomputed inside a reduction (an anchor keeps its MACs, section 4.1)."""
    changed = True
    while changed:
        changed = False
        buffers = {b.name for b in alloc_buffers(sch.mod["main"])}
        for name in reversed(block_names(sch.mod["main"])):
            rv = sch.get_sblock(name)
            block = sch.get(rv)
            if is_reduction(block) or block.writes[0].source.name not in buffers:
                continue
            consumers = sch.get_consumers(rv)
            if consumers and not any(is_reduction(sch.get(c)) for c in consumers):
                changed |= try_primitive(sch.compute_inline, rv)


def _anchor_output(sch, outputs: list, shape: tuple[int, ...]):
    """The output block the plan's split refers to: the last one of the plan's output shape."""
    for rv in reversed(outputs):
        if tuple(int(d) for d in sch.get(rv).writes[0].source.shape) == tuple(shape):
            return rv
    raise Unsupported(f"no output of shape {shape}")


def _piece_loop(sch, store, splits: dict[int, int]):
    """Split the output copy's loops per ``splits`` and fuse the outer parts into one loop; a 0-d
    output has no loop to split (the layer-bound form, :func:`stage_layers`, takes it)."""
    loops = sch.get_loops(store)
    if not loops:
        raise Unsupported("a 0-d output has no loop to split into pieces")
    outers, inners = [], []
    for d, loop in enumerate(loops):
        extent = int(sch.get(loop).extent)
        pieces = splits.get(d, 1)
        if extent % pieces:
            raise Unsupported(f"{pieces} pieces do not divide extent {extent} of dim {d}")
        outer, inner = sch.split(loop, [pieces, extent // pieces])
        outers.append(outer)
        inners.append(inner)
    sch.reorder(*outers, *inners)
    return sch.fuse(*outers) if len(outers) > 1 else outers[0]


def _depends_on(realize, name: str, var) -> bool:
    """Whether the block's read region of buffer ``name`` moves with loop ``var``."""
    moves = {iv.var.name for iv, value in zip(realize.block.iter_vars, realize.iter_values)
             if any(v.same_as(var) for v in vars_in(value))}
    return any(v.name in moves for r in realize.block.reads if r.source.name == name
               for rng in r.region for v in vars_in(rng.min))


def _read_index(sch, rv, name: str) -> int:
    return next(i for i, r in enumerate(sch.get(rv).reads) if r.source.name == name)


def _same(sch, a, b) -> bool:
    return sch.get_sref(a).same_as(sch.get_sref(b))


def _block_rvs(sch) -> list:
    """Every leaf block, in program order (without name lookups: cache stages may share names)."""
    return sch.get_child_blocks(sch.get_sblock("root"))


def _realize(sch, rv):
    """The realize of block ``rv``: under its innermost loop, without walking the function."""
    loops = sch.get_loops(rv)
    block = sch.get(rv)
    if loops:
        body = sch.get(loops[-1]).body
        for stmt in (body.seq if isinstance(body, tirx.SeqStmt) else [body]):
            if isinstance(stmt, s_tir.SBlockRealize) and stmt.block.same_as(block):
                return stmt
    return realizes(sch.mod["main"])[block.name_hint]

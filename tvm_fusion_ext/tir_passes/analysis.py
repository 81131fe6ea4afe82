"""Read-only analysis of a PrimFunc's sblocks, shared by the schedule rules.

Scheduling (``loop_fusion``, ``plain_schedule``) is kept apart from analysis, as in
``tvm.s_tir.dlight`` (``dlight/analysis``). Everything here reads index maps only, never op names:

* :func:`analyze_blocks` returns one :class:`BlockInfo` per child block of the root, or ``None`` when
  the function is outside what the rules handle (nested or predicated blocks, non-trivial
  bindings, symbolic extents);
* :func:`pick_anchor` is GraphTurbo section 4.1's anchor choice (conv / matmul, else the last op);
* :func:`tile_footprint` / :func:`choose_tile` size the anchor tile so its working set fits the
  spec's fast memory (GraphTurbo section 4.1, "largest integer that divides the loop extent").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx

from ..hardware import HardwareSpec

# Bytes of one cache line (x86 and Arm cores alike).
CACHE_LINE_BYTES = 64
SPATIAL = 0
REDUCE = 2


@dataclass
class BlockInfo:
    """One child block of the root: its loops (outer to inner) and the iter var each loop binds."""

    name: str
    block: s_tir.SBlock
    loop_iters: list  # IterVar bound by each loop, outer to inner
    extents: list[int]

    @property
    def is_reduction(self) -> bool:
        return is_reduction(self.block)

    @property
    def spatial_positions(self) -> list[int]:
        return [i for i, iv in enumerate(self.loop_iters) if iv.iter_type == SPATIAL]

    @property
    def reduce_positions(self) -> list[int]:
        return [i for i, iv in enumerate(self.loop_iters) if iv.iter_type == REDUCE]

    @property
    def is_contraction(self) -> bool:
        """conv / matmul: a reduction whose every operand (>= 2) is walked along a reduce iter."""
        if not self.is_reduction:
            return False
        reduce_vars = [iv.var for iv in self.block.iter_vars if iv.iter_type == REDUCE]
        operands = self.operand_reads
        return len(operands) >= 2 and all(
            any(uses_any(rg.min, reduce_vars) for rg in read.region) for read in operands)

    @property
    def is_windowed(self) -> bool:
        """A reduction over windows (a pooling): every reduce iter indexes each operand only
        together with a spatial iter (``x[h * stride + kh]``), so an output row reads a few rows
        of its operand."""
        if not self.is_reduction:
            return False
        reduce_vars = [iv.var for iv in self.block.iter_vars if iv.iter_type == REDUCE]
        spatial_vars = [iv.var for iv in self.block.iter_vars if iv.iter_type != REDUCE]
        return bool(self.operand_reads) and all(
            any(uses_any(rg.min, reduce_vars) for rg in read.region)
            and all(uses_any(rg.min, spatial_vars) for rg in read.region if uses_any(rg.min, reduce_vars))
            for read in self.operand_reads)

    @functools.cached_property
    def accesses(self) -> tuple[Access, ...]:
        """The :class:`Access` of every operand read (in :attr:`operand_reads` order) and of the
        write, computed once per block."""
        iters = [iv.var for iv in self.loop_iters]
        accesses = []
        for region in list(self.operand_reads) + list(self.block.writes):
            dims = _affine_dims(region, iters)
            accesses.append(Access(dims, tvm.runtime.DataType(str(region.source.dtype)).bits // 8,
                                   _spans(region, iters, dims)))
        return tuple(accesses)

    @property
    def operand_reads(self) -> list:
        """Reads other than the reduction's self-read of its output."""
        outs = [w.source for w in self.block.writes]
        return [r for r in self.block.reads if not any(r.source.same_as(o) for o in outs)]

    @property
    def is_padding(self) -> bool:
        """A spatial block whose value is selected by a condition (padding, boundary masks)."""
        found = []
        tvm_ffi.structural_walk(self.block.body, [(tvm.ir.Call, found.append)])
        return any(str(getattr(c.op, "name", "")).endswith("if_then_else") for c in found) or _has_select(
            self.block.body)

    @property
    def is_copy(self) -> bool:
        """Pure data movement (reshape, transpose, broadcast): the stored value is one load."""
        body = self.block.body
        return isinstance(body, tirx.BufferStore) and isinstance(body.value, tvm.ir.TensorLoad)

    @property
    def is_plain_copy(self) -> bool:
        """A copy whose load is indexed by block iterators and constants only (a copy or a
        transpose, not a slice, reshape or shuffle)."""
        if not self.is_copy:
            return False
        iterators = [iv.var for iv in self.block.iter_vars]
        return all(isinstance(index, tirx.IntImm) or any(index.same_as(v) for v in iterators)
                   for index in self.block.body.value.indices)

    def vector_position(self) -> int | None:
        """Loop to vectorise: the innermost spatial loop, if it walks the output's last dimension."""
        spatial = self.spatial_positions
        if not spatial or self.extents[spatial[-1]] <= 1:
            return None
        pos = spatial[-1]
        if self.block.writes[0].region[-1].min.same_as(self.loop_iters[pos].var):
            return pos
        return None


def analyze_blocks(sch: s_tir.Schedule, skip_loopless: bool = False
                   ) -> list[tuple[object, BlockInfo]] | None:
    """``[(block_rv, BlockInfo)]`` for the root's child blocks, or ``None`` if any is unsupported.
    ``skip_loopless``: leave out a block without loops whose iterations are all constants (e.g.
    the 0-d mean of a layer norm over every axis) instead of declining the function."""
    func = sch.mod["main"]
    realizes = {}
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize,
                                         lambda r: realizes.__setitem__(r.block.name_hint, r))])
    root = sch.get_sblock("root") if "root" in realizes else None
    if root is None:
        return None
    children = sch.get_child_blocks(root)
    if len(children) + 1 != len(realizes):
        return None  # nested blocks (blockized / opaque) are left to the fallback
    infos = []
    for rv in children:
        block = sch.get(rv)
        realize = realizes[block.name_hint]
        if not is_const_one(realize.predicate) or block.match_buffers or len(block.writes) != 1:
            return None
        loops = [sch.get(lp) for lp in sch.get_loops(rv)]
        if skip_loopless and not loops and all(isinstance(v, tirx.IntImm) for v in realize.iter_values):
            continue
        if len(loops) != len(block.iter_vars):
            return None
        by_var, units = {}, []
        for iv, value in zip(block.iter_vars, realize.iter_values):
            if iv.iter_type not in (SPATIAL, REDUCE):
                return None
            if isinstance(value, tvm.ir.Var):
                by_var[value] = iv
            elif isinstance(value, tirx.IntImm) and is_const_one(iv.dom.extent):
                units.append(iv)  # a unit axis whose loop variable a simplifier replaced by 0
            else:
                return None
        loop_iters, extents = [], []
        for loop in loops:
            if not isinstance(loop.extent, tirx.IntImm) or int(loop.min) != 0 \
                    or loop.kind != tirx.ForKind.SERIAL:
                return None
            if loop.loop_var in by_var:
                loop_iters.append(by_var[loop.loop_var])
            elif int(loop.extent) == 1 and units:
                loop_iters.append(units.pop(0))
            else:
                return None
            extents.append(int(loop.extent))
        infos.append((rv, BlockInfo(block.name_hint, block, loop_iters, extents)))
    return infos


def pick_anchor(infos: list[BlockInfo]) -> int:
    """GraphTurbo section 4.1: the (last) conv / matmul block if there is one, else the last block.

    When blocks without a reduction follow the last block that reads a row-sized reduction
    result (the normalisation of a layer norm or softmax, then a copy of it into a second output:
    APOLLO section 4.2's stitched followers), that block is the anchor: its rows are the
    reduction's, and the blocks after it are its consumers.
    """
    for index in range(len(infos) - 1, -1, -1):
        if infos[index].is_contraction:
            return index
    last = len(infos) - 1
    if infos[last].is_reduction:
        return last
    row_sized = []  # reduction outputs and the same-shaped values computed from them
    for index, info in enumerate(infos):
        out = info.block.writes[0].source
        reads_rows = [r.source for r in info.block.reads if any(r.source.same_as(b) for b in row_sized)]
        if info.is_reduction or any(_same_shape(out, b) for b in reads_rows):
            row_sized.append(out)
        elif reads_rows and not any(i.is_reduction for i in infos[index + 1:]):
            return index
    return last


def _same_shape(a, b) -> bool:
    return [int(x) for x in a.shape] == [int(x) for x in b.shape]


@dataclass(frozen=True)
class Access:
    """One buffer region of a block as an affine function of its loop positions.

    ``dims`` holds, per buffer dimension, ``(size, extent, coefficients)``: the region's extent
    at one loop iteration and the index's coefficient for each loop position, or ``(size, None,
    None)`` when the index is not affine. A non-affine index takes at most one value per
    iteration of the loops it uses (``spans``, per dimension: their positions, ``None`` for an
    affine index or one of unknown loops): ``v % 2 * 116 + v // 2``, a channel shuffle inlined
    into a conv's input, touches as many channels as ``v`` runs over, not the whole dimension.
    """

    dims: tuple
    itemsize: int
    spans: tuple = ()
    # per dimension, ``(position, |coefficient|)`` of the loops its index uses (None: not affine)
    terms: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.spans:
            object.__setattr__(self, "spans", (None,) * len(self.dims))
        object.__setattr__(self, "terms", tuple(
            None if coeffs is None else tuple((p, abs(c)) for p, c in enumerate(coeffs) if c)
            for _, _, coeffs in self.dims))

    def dim_extents(self, extents) -> list[int]:
        """Per buffer dimension, the indices touched while every loop ``p`` runs over
        ``extents[p]`` iterations."""
        return [min(size, extent + sum(c * (extents[p] - 1) for p, c in terms)) if terms is not None
                else size if span is None else min(size, math.prod(extents[p] for p in span))
                for (size, extent, _), terms, span in zip(self.dims, self.terms, self.spans)]

    def stride_bytes(self, position: int) -> int:
        """Bytes between the addresses of two consecutive iterations of loop ``position`` in
        the row-major buffer (0 when no affine index uses it; a non-affine index using it counts
        its dimension's whole row)."""
        stride, row = 0, self.itemsize
        for (size, _, coeffs), span in zip(reversed(self.dims), reversed(self.spans)):
            if coeffs is not None:
                stride += abs(coeffs[position]) * row
            elif span is not None and position in span:
                stride += row
            row *= size
        return stride

    def elements(self, extents) -> int:
        """Elements touched while every loop ``p`` runs over ``extents[p]`` iterations."""
        return math.prod(self.dim_extents(extents))

    def bytes(self, extents) -> int:
        return self.elements(extents) * self.itemsize

    def line_bytes(self, extents, line: int = CACHE_LINE_BYTES) -> float:
        """Bytes of the cache lines :meth:`elements` occupy (expected over the alignments the
        region's rows can have): the region is rows of one contiguous run each (the innermost
        dimensions it covers whole, and the first it covers in part); a run of ``b`` bytes whose
        start is a multiple of ``g`` bytes spans ``(b + line - g) / line`` lines on average. A
        strided operand (an NCHW conv's input read along its channels, one short row per channel)
        then costs its lines, not its elements."""
        rows, run_bytes, row_stride = self._runs(extents)
        align = math.gcd(line, run_bytes, row_stride)
        return rows * (run_bytes + line - align)

    def runs(self, extents) -> int:
        """Contiguous runs (rows of :meth:`line_bytes`) the region touched over ``extents`` is."""
        return self._runs(extents)[0]

    def _runs(self, extents) -> tuple[int, int, int]:
        """``(runs, bytes per run, bytes between runs)`` of the region touched over ``extents``."""
        touched = self.dim_extents(extents)
        sizes = [size for size, _, _ in self.dims]
        run, split = 1, 0
        for dim in range(len(sizes) - 1, -1, -1):
            run *= touched[dim]
            if touched[dim] < sizes[dim]:
                split = dim
                break
        return math.prod(touched[:split]), run * self.itemsize, math.prod(sizes[split:]) * self.itemsize


def _affine_dims(region, iters) -> tuple:
    """:attr:`Access.dims` of ``region``. A run of dimensions whose indices are not affine one by
    one but whose flattened index is (``i // 197``, ``i % 197``: a reshape ``FuseTIR`` inlined in
    front of a matmul, reading ``[8, 197, 192]`` as ``[1576, 192]``) is one dimension of their
    combined size; counted whole, it made a panel of four rows the whole tensor."""
    shape = [int(n) for n in region.source.shape]
    ranges = list(region.region)
    dims, dim = [], 0
    while dim < len(ranges):
        dim, entry = _dimension_run(ranges, shape, dim, iters)
        dims.append(entry)
    return tuple(dims)


def _spans(region, iters, dims) -> tuple:
    """:attr:`Access.spans` of ``region`` whose :attr:`Access.dims` are ``dims``: for a
    non-affine dimension (one region dimension of extent 1), the positions of the loops its index
    uses."""
    if len(dims) != len(region.region):
        return ()  # a run of dimensions was flattened: every index of it is affine
    spans = []
    for (_, extent, _), rng in zip(dims, region.region):
        if extent is not None or not _is_int(rng.extent) or int(rng.extent) != 1:
            spans.append(None)
        else:
            spans.append(tuple(p for p, var in enumerate(iters) if uses_any(rng.min, [var])))
    return tuple(spans)


def _dimension_run(ranges, shape, dim, iters) -> tuple[int, tuple]:
    """``(first dimension after the run, its Access.dims entry)`` for the run starting at ``dim``:
    ``dim`` alone when its index is affine (or when no run from it is), else the shortest run of
    single-point dimensions whose flattened index is affine."""
    coeffs = _affine_coeffs(ranges[dim].min, iters) if _is_int(ranges[dim].extent) else None
    if coeffs is not None:
        return dim + 1, (shape[dim], int(ranges[dim].extent), coeffs)
    if flattened_index(ranges, shape, dim, len(ranges)) is not None:  # points to the last dimension
        for last in range(dim + 1, len(ranges)):
            coeffs = _affine_coeffs(flattened_index(ranges, shape, dim, last + 1), iters)
            if coeffs is not None:
                return last + 1, (math.prod(shape[dim:last + 1]), 1, coeffs)
    return dim + 1, (shape[dim], None, None)


def flattened_index(ranges, shape, first: int, stop: int):
    """The simplified row-major index that dimensions ``first`` to ``stop - 1`` of a region
    address together (``i // 28 * 28 + i % 28`` is ``i``), or ``None`` unless each of them is a
    single point. ``ranges`` are the region's ranges, ``shape`` its buffer's (ints)."""
    if not all(_is_int(r.extent) and int(r.extent) == 1 for r in ranges[first:stop]):
        return None
    flat = ranges[first].min
    for dim in range(first + 1, stop):
        flat = flat * shape[dim] + ranges[dim].min
    return sym.Analyzer().simplify(flat)


def _affine_coeffs(index, iters) -> tuple[int, ...] | None:
    """The coefficient of each loop variable in ``index``, or None when it is not affine."""
    coeffs = sym.detect_linear_equation(index, iters)
    return None if len(coeffs) == 0 else tuple(int(c) for c in coeffs[:-1])


def tile_footprint(info: BlockInfo, tile: dict[int, int]) -> int:
    """Bytes touched by one tile of ``info``: ``tile`` maps loop position -> tile extent; loops
    not in it (reduce loops included) cover their whole extent. Non-affine indices count whole."""
    extents = [tile.get(p, e) for p, e in enumerate(info.extents)]
    return sum(a.bytes(extents) for a in info.accesses)


# With this many tiles per core, a tile count that is no multiple of the cores costs little.
BALANCED_TILES = 4


def choose_tile(info: BlockInfo, tiled: list[int], minimum: dict[int, int],
                spec: HardwareSpec) -> dict[int, int]:
    """GraphTurbo section 4.1 tile sizes for the loops at positions ``tiled`` (outer to inner).

    Greedily from the innermost tiled loop outwards, each tile size is the largest divisor of the
    loop extent (a multiple of ``minimum[pos]``, the register / vector factor) whose tile working
    set still fits ``spec.fast_memory_bytes``; once a loop cannot be taken whole, the loops outside
    it keep their minimum. Tiles are then halved from the outside in until there are at least
    ``spec.num_cores`` of them, and a multiple of it unless there are :data:`BALANCED_TILES`
    per core (3 heads on 2 cores would leave one core idle a third of the time), so the fused
    tile loop feeds every core alike.
    """
    tile = {p: minimum.get(p, 1) for p in tiled}
    for pos in reversed(tiled):
        best = tile[pos]
        for size in _candidates(info.extents[pos], minimum.get(pos, 1)):
            if tile_footprint(info, {**tile, pos: size}) <= spec.fast_memory_bytes:
                best = max(best, size)
        tile[pos] = best
        if best < info.extents[pos]:
            break

    def num_tiles():
        count = 1
        for p in tiled:
            count *= info.extents[p] // tile[p]
        return count

    def unbalanced():
        count = num_tiles()
        return count < spec.num_cores or (count % spec.num_cores and count < BALANCED_TILES * spec.num_cores)

    changed = True
    while unbalanced() and changed:
        changed = False
        for pos in tiled:
            smaller = [s for s in _candidates(info.extents[pos], minimum.get(pos, 1)) if s < tile[pos]]
            if smaller:
                tile[pos] = smaller[-1]
                changed = True
                break
    return tile


def vector_factor(extent: int, lanes: int) -> int | None:
    """Width of the vectorised loop: the largest divisor of ``extent`` up to two vectors,
    preferring multiples of ``lanes``; ``None`` when only 1 divides."""
    divisors = [d for d in range(2, min(extent, 2 * lanes) + 1) if extent % d == 0]
    if not divisors:
        return None
    aligned = [d for d in divisors if d % lanes == 0]
    return max(aligned) if aligned else max(divisors)


def _candidates(extent: int, multiple: int) -> list[int]:
    return [d for d in range(multiple, extent + 1, multiple) if extent % d == 0]


def uses_any(expr, variables) -> bool:
    """Whether ``expr`` reads any of ``variables``."""
    if isinstance(expr, tvm.ir.Var):  # most buffer indices: answered without a walk
        return any(expr.same_as(v) for v in variables)
    if isinstance(expr, tirx.IntImm):
        return False
    found = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.Var, found.append)])
    return any(any(f.same_as(v) for v in variables) for f in found)


def _has_select(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, [(tirx.Select, found.append)])
    return bool(found)


def is_const_one(expr) -> bool:
    """``expr`` is the integer constant 1 (a true predicate, a unit extent, a unit stride)."""
    return isinstance(expr, tirx.IntImm) and int(expr) == 1


def _is_int(expr) -> bool:
    return isinstance(expr, tirx.IntImm)


def is_reduction(block) -> bool:
    """Whether ``block`` has a reduction iterator."""
    return any(iv.iter_type == REDUCE for iv in block.iter_vars)


def sblocks(func: tirx.PrimFunc, order: str = "pre") -> list:
    """Every block of ``func``, the root included, in pre-order (program order) or post-order."""
    out: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, out.append)], order=order)
    return out


def block_names(func: tirx.PrimFunc) -> list[str]:
    """Names of the blocks of ``func`` but the root, in program order."""
    return [b.name_hint for b in sblocks(func) if b.name_hint != "root"]


def compact_buffers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its allocations placed and its buffers compacted, as the first steps of
    TVM's TIR lowering compute them."""
    passes = tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
    ])
    return passes(tvm.IRModule({"main": func}))["main"]


def compacts_well_formed(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` stays well formed through buffer compaction (:func:`compact_buffers`).
    ``CompactBufferAllocation`` can give a buffer an offset in a loop variable of another scope
    where a block reads it through ``floordiv`` / ``floormod`` of a split index (a channel
    shuffle's concatenation staged per tile); such a kernel fails to build (``MakePackedAPI``:
    a variable used before its definition), which ``undefined_vars`` reports by raising."""
    try:
        tvm.tirx.analysis.undefined_vars(compact_buffers(func).body, [])
    except tvm.error.InternalError:
        return False
    return True


def lowered_allocations(func: tirx.PrimFunc) -> dict[str, tuple[list[int], str]]:
    """``{buffer name: (shape, scope)}`` of the intermediates lowering will allocate for ``func``.

    Runs the first steps of TVM's TIR lowering (allocation placement and buffer compaction), so
    the shapes are the ones a tile really needs: what "intermediates shrink to tile size" means.
    """
    return {buf.name: ([int(d) for d in buf.shape], buf.scope())
            for block in sblocks(compact_buffers(func), order="post") for buf in block.alloc_buffers}


def regions_exact(sch: s_tir.Schedule) -> bool:
    """Whether every block declares exactly the buffer regions its body reads and writes.

    Schedule primitives that move a block (``compute_at``, ``reverse_compute_at``) trust the
    declared regions; TE's concat declares only its last segment, so a moved concat would compute
    one segment per tile. Rules that move blocks decline such functions.
    """
    func = sch.mod["main"]
    blocks = sblocks(func)
    buffers = {param: param for param in func.params}
    buffers.update({buf: buf for block in blocks for buf in block.alloc_buffers})
    for block in blocks:
        if block.name_hint == "root":
            continue
        reads, writes = s_tir.analysis.get_sblock_read_write_region(block, buffers)
        if not (_same_regions(reads, block.reads) and _same_regions(writes, block.writes)):
            return False
    return True


def _same_regions(detected, declared) -> bool:
    return len(detected) == len(declared) and all(
        any(tvm_ffi.structural_equal(d, r) for r in declared) for d in detected)


def realize_of(sch: s_tir.Schedule, name: str) -> s_tir.SBlockRealize:
    """The ``SBlockRealize`` of block ``name`` in the schedule's current function."""
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(s_tir.SBlockRealize, found.append)])
    return next(r for r in found if r.block.name_hint == name)


def indexes_trailing(regions, variables: list, extents: list[int]) -> bool:
    """Whether every region using any of ``variables`` indexes exactly them, in order, in its last
    dimensions (one element each), with the buffer's extents after the first of them equal to
    ``extents[1:]``: loops over ``variables`` fused into one walk those buffers contiguously."""
    count = len(variables)
    for region in regions:
        dims = region.region
        if not any(uses_any(dim.min, variables) for dim in dims):
            continue
        if len(dims) < count or any(uses_any(dim.min, variables) for dim in dims[:-count]):
            return False
        if not all(dim.min.same_as(var) and is_const_one(dim.extent)
                   for dim, var in zip(dims[-count:], variables)):
            return False
        shape = region.source.shape[len(region.source.shape) - count:]
        if any(not isinstance(d, tirx.IntImm) or int(d) != e for d, e in zip(shape[1:], extents[1:])):
            return False
    return True


def try_primitive(primitive, *args, **kwargs) -> bool:
    """Apply one schedule primitive; a ScheduleError leaves the schedule as it was."""
    try:
        primitive(*args, **kwargs)
        return True
    except s_tir.ScheduleError:
        return False


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]

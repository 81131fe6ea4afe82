"""GraphTurbo kernel generation on the DSA (graphturbo-dsa-scheduling.txt section 4, Fig. 10-13).

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

:func:`schedule_subgraph` chooses the pieces: dimensions whose split recomputes more than the
partitioner's bound (section 3.1) are not bound; the plan's instances times its binding come
first, then finer pieces until every core has one and a piece fits LB (only with instance
splitting on; Fig. 15's first two bars keep the binding's pieces and spill), and the candidate the
simulator finds fastest is kept.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..partitioners.graphturbo.kernel_plan import SubgraphPlan
from ..partitioners.graphturbo.memory import Tensor, allocate
from ..partitioners.graphturbo.split_info import MAX_RECOMPUTE_RATIO
from .kernel_model import CORES, DOUBLE_BUFFER, TILE, _compact, kernel_model
from .simulator import fits, kernel_cycles
from .spec import DSASpec

LB = "local.dsa_lb"
GB = "global.dsa_gb"
DDR = "global"
# One promoted weight chunk takes at most this fraction of LB (section 2.2: "a small, fixed size
# of buffers in LB to allow for the promotion of such tensors").
WEIGHT_BUFFER_FRACTION = 4
# Piece splits evaluated per sub-graph (each one a full schedule and simulation).
MAX_PIECE_TRIALS = 5
# Largest divisors tried per tiled loop of an anchor.
MAX_TILE_OPTIONS = 8
_LOG = logging.getLogger(__name__)


class Unsupported(Exception):
    """The sub-graph cannot be staged this way (the caller falls back to the per-kernel schedule)."""


@dataclass
class Staged:
    """One staged candidate: its TIR, kernel model, pieces, spills and simulated cycles."""

    func: tirx.PrimFunc
    model: dict
    splits: dict[int, int]
    spill: dict[str, str]
    cycles: int
    fits: bool

    @property
    def pieces(self) -> int:
        return math.prod(self.splits.values())


# ---- one schedule --------------------------------------------------------------------------------
def stage_subgraph(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan,
                   splits: dict[int, int], spill: dict[str, str] | None = None,
                   staging: bool = True) -> tirx.PrimFunc:
    """The kernel of the module docstring, with the output split ``{dim: pieces}`` and the
    intermediates named in ``spill`` placed in that scope (others in LB). ``staging=False`` stops
    after the pieces (no DMA, promotion or scopes): enough to count operations."""
    sch = s_tir.Schedule(func)
    _inline_elementwise(sch)
    params = {p.name for p in sch.mod["main"].params}
    intermediates = {b.name for b in _alloc_buffers(sch.mod["main"])}
    outputs = [rv for rv in (sch.get_sblock(n) for n in _block_names(sch.mod["main"]))
               if any(w.source.name in params for w in sch.get(rv).writes)]
    if not outputs:
        raise Unsupported("no block writes an output")
    spill = spill or {}
    anchor = _anchor_output(sch, outputs, plan.output_shape)

    def cache_output(rv):
        return sch.cache_write(rv, 0, spill.get(sch.get(rv).writes[0].source.name, LB))

    store = cache_output(anchor)
    piece = _piece_loop(sch, store, splits)
    skip = {sch.get(store).name_hint}
    others = [cache_output(rv) for rv in outputs if not sch.get(rv).same_as(sch.get(anchor))]
    skip |= {sch.get(rv).name_hint for rv in others}
    for name in reversed(_block_names(sch.mod["main"])):
        if name not in skip:
            _try(sch.compute_at, sch.get_sblock(name), piece, preserve_unit_loops=True)
    for rv in others:
        if not _try(sch.reverse_compute_at, rv, piece, preserve_unit_loops=True):
            raise Unsupported("a second output cannot follow the piece loop")
    if staging:
        for name in _block_names(sch.mod["main"]):
            rv = sch.get_sblock(name)
            buf = sch.get(rv).writes[0].source
            if buf.name in intermediates and buf.scope() != spill.get(buf.name, LB):
                sch.set_scope(rv, 0, spill.get(buf.name, LB))
        _stage_inputs(sch, spec, params, piece, spill)
        if spec.matrix_shape is not None:
            from .intrinsics import tensorize_contractions

            sch = tensorize_contractions(sch, spec)
    sch.annotate(piece, TILE, 1)
    sch.annotate(piece, CORES, spec.num_cores)
    sch.annotate(piece, DOUBLE_BUFFER, int(plan.options.instruction_scheduling))
    out = sch.mod["main"]
    return _promote_per_cluster(out, spec) if staging else out


def _stage_inputs(sch: s_tir.Schedule, spec: DSASpec, params: set, piece,
                  spill: dict[str, str]) -> None:
    """Inputs of a piece (module docstring, item 3): activations DDR -> LB (or GB when spilled) per
    piece; weights DDR -> GB once, then GB -> LB per chunk of the anchor reading them, or per piece
    for small element-wise operands; an anchor's spilled operands GB -> LB per chunk and its
    spilled output written back per chunk."""
    budget = spec.lb_bytes // WEIGHT_BUFFER_FRACTION
    piece_var = sch.get(piece).loop_var
    realizes = _realizes(sch.mod["main"])
    readers: dict[str, list[str]] = {}
    for name, realize in realizes.items():
        for region in realize.block.reads:
            if region.source.name in params and name not in readers.setdefault(region.source.name, []):
                readers[region.source.name].append(name)
    small: list[tuple[str, str]] = []  # (first reader, promoted buffer) staged per piece
    for pname, names in readers.items():
        first = sch.get_sblock(names[0])
        if any(_depends_on(realizes[n], pname, piece_var) for n in names):
            copy = sch.cache_read(first, _read_index(sch, first, pname), spill.get(pname, LB))
            if not _try(sch.compute_at, copy, piece, preserve_unit_loops=True):
                raise Unsupported(f"input {pname} cannot be staged per piece")
            continue
        gb = sch.get(sch.cache_read(first, _read_index(sch, first, pname), GB)).writes[0].source
        anchor_read = len(names) == 1 and _is_reduction(realizes[names[0]].block)
        if not anchor_read and _buffer_bytes(gb) <= budget:
            small.append((names[0], gb.name))
    for reader, gb_name in small:  # one LB copy per piece, read by every reader
        rv = sch.get_sblock(reader)
        copy = sch.cache_read(rv, _read_index(sch, rv, gb_name), LB)
        sch.compute_at(copy, piece, preserve_unit_loops=True)
    for name in _block_names(sch.mod["main"]):
        rv = sch.get_sblock(name)
        block = sch.get(rv)
        if not _is_reduction(block):
            continue
        written = block.writes[0].source
        readers_of = {r.source.name: r.source for r in block.reads}
        staged = [n for n, buf in readers_of.items()
                  if buf.scope() in (GB, DDR) and not buf.same_as(written)]
        spilled_out = written.scope() != LB
        if not staged and not spilled_out:
            continue
        spatial, reduce = _chunk_loops(sch, rv, set(staged), spec, budget, spilled_out)
        inner = ([*spatial, *reduce] or [piece])[-1]
        for bname in staged:
            copy = sch.cache_read(rv, _read_index(sch, rv, bname), LB)
            _try(sch.compute_at, copy, inner, preserve_unit_loops=True)
        if spilled_out:
            write = sch.cache_write(rv, 0, LB)
            _try(sch.reverse_compute_at, write, (spatial or [piece])[-1], preserve_unit_loops=True)


def _chunk_loops(sch: s_tir.Schedule, rv, staged: set[str], spec: DSASpec, budget: int,
                 spilled_out: bool) -> tuple[list, list]:
    """Tile an anchor below the piece loop (section 4.1, Fig. 11): its two outermost spatial loops,
    and its outer reduction loop, get the tile sizes that minimise the time of the DMAs bringing the
    ``staged`` operands (promoted weights, spilled tensors) into LB per chunk - bytes at the GB
    rate of one core plus one DMA latency per transfer - while the double-buffered chunks fit
    ``budget``; GEMM-shaped anchors tile their last two spatial loops instead, with multiples of the
    matrix unit's shape. The outer loops of the splits are moved right below the piece loop;
    returns them as ``(spatial, reduction)`` lists."""
    realize = _realizes(sch.mod["main"])[sch.get(rv).name_hint]
    block = realize.block
    own = sch.get_loops(rv)[1:]
    extent = {sch.get(lp).loop_var.name: int(sch.get(lp).extent) for lp in own}
    order = [sch.get(lp).loop_var.name for lp in own]
    feeds: dict[str, tuple[str, int]] = {}  # loop var -> (block var, iter type)
    for iv, value in zip(block.iter_vars, realize.iter_values):
        for var in _vars(value):
            if var.name in extent:
                feeds.setdefault(var.name, (iv.var.name, int(iv.iter_type)))
    spatial = [v for v in order if v in feeds and feeds[v][1] == 0 and extent[v] > 1]
    matrix = spec.matrix_shape if _gemm_like(block) else None
    spatial = spatial[-2:] if matrix is not None else spatial[:2]
    reduce = [v for v in order if v in feeds and feeds[v][1] == 2 and extent[v] > 1][:1]
    tiled = spatial + reduce
    if not tiled:
        return [], []
    regions = [r for r in block.reads if r.source.name in staged]
    if spilled_out:
        regions += list(block.writes)
    rate = spec.bytes_per_cycle("gb") / spec.cores_per_cluster
    best = None
    shape = None if matrix is None else (*matrix[2 - len(spatial):2], *matrix[2:][:len(reduce)])
    for sizes in _tile_choices([extent[v] for v in tiled], shape):
        tile = dict(zip(tiled, sizes))
        dom = {feeds[v][0]: tile.get(v, extent[v]) for v in order if v in feeds}
        per_chunk = [_span_bytes(r, dom) for r in regions]
        if 2 * sum(per_chunk) > budget:
            continue
        chunks = math.prod(extent[v] // tile[v] for v in tiled)
        cost = chunks * (sum(per_chunk) / rate + len(per_chunk) * spec.dma_latency_cycles)
        if best is None or cost < best[0]:
            best = (cost, tile)
    if best is None:
        best = (0, {v: 1 for v in tiled})
    loops = {sch.get(lp).loop_var.name: lp for lp in own}
    split = {v: sch.split(loops[v], [extent[v] // best[1][v], best[1][v]])[0]
             for v in tiled if best[1][v] < extent[v]}
    if not split:
        return [], []
    outers = list(split.values())
    rest = [lp for lp in sch.get_loops(rv)[1:] if not any(_same(sch, lp, o) for o in outers)]
    sch.reorder(*outers, *rest)
    return [split[v] for v in spatial if v in split], [split[v] for v in reduce if v in split]


def _tile_choices(extents: list[int], matrix: tuple[int, ...] | None) -> list[tuple[int, ...]]:
    """Tile sizes per tiled loop (its largest divisors); multiples of the matrix unit's shape
    (``matrix``, one entry per loop) when every extent allows, else any divisors."""
    options = [_divisors(e) for e in extents]
    if matrix is not None:
        shaped = [[d for d in opts if d % m == 0] for opts, m in zip(options, matrix)]
        if all(shaped):
            options = shaped
    out = [()]
    for opts in options:
        out = [t + (d,) for t in out for d in opts[-MAX_TILE_OPTIONS:]]
    return out


def _span_bytes(region, dom: dict[str, int]) -> int:
    """Bytes of ``region`` when each block var ``v`` ranges over ``dom[v]`` values."""
    analyzer = tvm.sym.Analyzer()
    sets = {}
    total = 1
    for rng, dim in zip(region.region, region.source.shape):
        for var in _vars(rng.min):
            if var.name in dom and var not in sets:
                dtype = str(var.ty.dtype)
                sets[var] = tvm.sym.IntervalSet(tirx.const(0, dtype),
                                                tirx.const(dom[var.name] - 1, dtype))
        bound = analyzer.int_set(rng.min, sets)
        span = int(bound.max_value) - int(bound.min_value) + int(rng.extent)
        total *= min(int(dim), span)
    return total * _elem_bytes(region.source)


def _gemm_like(block) -> bool:
    """A multiply-accumulate over exactly one reduction axis (what the matrix unit can take)."""
    body = block.body
    return (sum(iv.iter_type == 2 for iv in block.iter_vars) == 1
            and isinstance(body, tirx.BufferStore) and isinstance(body.value, tirx.Add)
            and any(isinstance(side, tirx.Mul) for side in (body.value.a, body.value.b)))


def _promote_per_cluster(func: tirx.PrimFunc, spec: DSASpec) -> tirx.PrimFunc:
    """Wrap the weight promotions (root-level DDR -> GB copies) in one loop over the clusters,
    annotated ``dsa.tile`` on ``clusters`` cores: every cluster fills its own GB (the copies are
    idempotent on the host), and the simulator charges each cluster's DDR traffic."""
    root = func.body.block
    stmts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    promote = [s for s in stmts if _is_promotion(s)]
    if not promote:
        return func
    rest = [s for s in stmts if not _is_promotion(s)]
    loop = tirx.For(tvm.ir.Var("cluster", "int32"), 0, spec.clusters, tirx.ForKind.SERIAL,
                    tirx.SeqStmt(promote) if len(promote) > 1 else promote[0],
                    annotations={TILE: 1, CORES: spec.clusters, DOUBLE_BUFFER: 0})
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                            tirx.SeqStmt([loop, *rest]), root.init, root.alloc_buffers,
                            root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(func.body.iter_values, func.body.predicate, new_root))


def _is_promotion(stmt) -> bool:
    blocks: list = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, blocks.append)])
    return bool(blocks) and all(b.writes and b.writes[0].source.scope() == GB
                                and b.name_hint.endswith("_global.dsa_gb") for b in blocks)


# ---- search --------------------------------------------------------------------------------------
def schedule_subgraph(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan) -> Staged:
    """Choose the pieces (module docstring) and return the fastest staged candidate."""
    func = unique_buffer_names(func)
    shape = tuple(plan.output_shape)
    base_ops = _total_ops(kernel_model(stage_subgraph(func, spec, plan, {}, staging=False)))
    bindable = [d for d in range(len(shape)) if shape[d] > 1 and _ops_within(
        func, spec, plan, {d: _smallest_factor(shape[d])}, base_ops)]
    best = None
    for splits in piece_candidates(shape, plan, bindable, spec.num_cores):
        try:
            staged = _evaluate(func, spec, plan, splits)
        except (Unsupported, s_tir.ScheduleError) as err:
            _LOG.info("graphturbo pieces %s declined: %s", splits, err)
            continue
        if _total_ops(staged.model) > MAX_RECOMPUTE_RATIO * base_ops:
            break  # finer pieces only recompute more
        if best is None or (staged.fits, -staged.cycles) > (best.fits, -best.cycles):
            best = staged
        elif best.fits and staged.pieces >= spec.num_cores:
            break  # finer pieces stopped paying off
    if best is None:
        raise Unsupported("no piece split could be staged")
    return best


def piece_candidates(shape: tuple[int, ...], plan: SubgraphPlan, bindable: list[int],
                     cores: int) -> list[dict[int, int]]:
    """Pieces to try, in order: the plan's instances (with instance splitting on) times its
    binding, refined along bindable dimensions (outermost first, by the smallest prime factor
    left) until every core has a piece; with instance splitting on, further refinements."""
    base: dict[int, int] = {}
    if plan.options.instances and plan.instances > 1 and plan.dim in bindable:
        # Algorithm 1 may pick a factor that does not divide the extent: round up to one that does
        base[plan.dim] = next(d for d in _divisors(shape[plan.dim]) if d >= plan.instances)
    for d, f in enumerate(plan.binding):
        if f > 1 and d in bindable and shape[d] % (base.get(d, 1) * f) == 0:
            base[d] = base.get(d, 1) * f
    out = [base]
    while len(out) < MAX_PIECE_TRIALS:
        if not plan.options.instances and math.prod(out[-1].values()) >= cores:
            break
        nxt = _refine(shape, out[-1], bindable)
        if nxt is None:
            break
        if not plan.options.instances:
            out[-1] = nxt  # binding only: one candidate, as many pieces as cores
        else:
            out.append(nxt)
    return out


def _refine(shape, splits: dict[int, int], bindable: list[int]) -> dict[int, int] | None:
    for d in bindable:
        left = shape[d] // splits.get(d, 1)
        if left > 1:
            return {**splits, d: splits.get(d, 1) * _smallest_factor(left)}
    return None


def _evaluate(func, spec: DSASpec, plan: SubgraphPlan, splits: dict[int, int]) -> Staged:
    """Stage with every piece tensor in LB (layer outputs in GB without buffer stitching), then,
    when the live LB buffers do not fit, place them by liveness (section 4.3) and stage again."""
    intermediates = {b.name for b in _alloc_buffers(func)}
    spill = {} if plan.options.stitch else dict.fromkeys(intermediates, GB)
    staged = stage_subgraph(func, spec, plan, splits, spill)
    model = kernel_model(staged)
    if not fits(model, spec, reuse=True):
        spill = {**spill, **_spill_plan(staged, model, spec, intermediates, spill)}
        staged = stage_subgraph(func, spec, plan, splits, spill)
        model = kernel_model(staged)
    return Staged(staged, model, splits, spill, kernel_cycles(model, spec),
                  fits(model, spec, reuse=True))


def _spill_plan(staged: tirx.PrimFunc, model: dict, spec: DSASpec, intermediates: set[str],
                placed: dict[str, str]) -> dict[str, str]:
    """Section 4.3 over one piece of a staged kernel. The piece's tensors are the layer outputs
    (``intermediates``, less those already ``placed``), the activation inputs staged per piece and
    the output written per piece; each lives from the first to the last computation touching it
    (leaf blocks in program order), doubled when it is a DMA target of a double-buffered piece.
    :func:`allocate` places them into what LB leaves beside the other buffers (the anchors' chunk
    buffers: their largest live total) and one core's share of GB, spilling the longest-lived
    first. Returns ``{name: scope}`` for the spilled ones: a layer output by its buffer name, an
    input or the output by its parameter name."""
    compact = _compact(staged)
    params = {p.name for p in compact.params}
    blocks = _blocks(compact)
    leaves = [b for b in blocks if b.name_hint != "root" and not _has_child(b)]
    double = any(p["double_buffer"] for p in model["phases"])
    key: dict[str, str] = {}  # LB buffer -> the name the spill plan uses for it
    dma: set[str] = set()
    for leaf in leaves:
        src = leaf.reads[0].source if len(leaf.reads) == 1 else None
        dst = leaf.writes[0].source if leaf.writes else None
        if src is not None and dst is not None and src.scope() != dst.scope():
            dma.add(dst.name)
            if src.name in params and dst.scope() == LB:
                key[dst.name] = src.name  # an activation input staged per piece
            if dst.name in params and src.scope() == LB:
                key[src.name] = dst.name  # the output written per piece
    sizes = {}
    for block in blocks:
        for buf in block.alloc_buffers:
            if buf.scope() == LB:
                sizes[buf.name] = _buffer_bytes(buf) * (2 if double and buf.name in dma else 1)
                original = buf.name.removesuffix(f"_{LB}")  # set_scope appends the scope
                if original in intermediates and original not in placed:
                    key[buf.name] = original
    first, last = {}, {}
    for ct, leaf in enumerate(leaves):
        for region in (*leaf.reads, *leaf.writes):
            first.setdefault(region.source.name, ct)
            last[region.source.name] = ct
    fixed = max((sum(size for name, size in sizes.items() if name not in key
                     and first.get(name, -1) <= ct <= last.get(name, -1))
                 for ct in range(len(leaves))), default=0)
    tensors = [Tensor(key[n], sizes[n], first.get(n, 0), last.get(n, 0)) for n in key if n in sizes]
    result = allocate(tensors, len(leaves), max(0, spec.lb_bytes - fixed),
                      spec.gb_bytes // spec.cores_per_cluster)
    scope = {"GB": GB, "DDR": DDR}
    return {name: scope[level] for name, level in result.level.items() if level != "LB"}


def _ops_within(func, spec, plan, splits, base_ops: int) -> bool:
    try:
        staged = stage_subgraph(func, spec, plan, splits, staging=False)
    except (Unsupported, s_tir.ScheduleError):
        return False
    return _total_ops(kernel_model(staged)) <= MAX_RECOMPUTE_RATIO * base_ops


# ---- helpers -------------------------------------------------------------------------------------
def unique_buffer_names(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every allocated buffer named uniquely (``FuseTIR`` may give several the same
    name; cache stages are named after their buffer, and the spill plan refers to buffers by name).
    The TVMScript printer already disambiguates names, so a print/parse round trip does it."""
    names = [b.name for b in _alloc_buffers(func)] + [p.name for p in func.params]
    if len(names) == len(set(names)):
        return func
    return tvm.script.from_source(func.script())


def _inline_elementwise(sch: s_tir.Schedule) -> None:
    """Inline element-wise / injective intermediates into element-wise consumers only: a layer's
    epilogue (bias, batch norm, ReLU, residual add, the next layer's padding) becomes one loop
    nest, and nothing is recomputed inside a reduction (an anchor keeps its MACs, section 4.1)."""
    changed = True
    while changed:
        changed = False
        buffers = {b.name for b in _alloc_buffers(sch.mod["main"])}
        for name in reversed(_block_names(sch.mod["main"])):
            rv = sch.get_sblock(name)
            block = sch.get(rv)
            if _is_reduction(block) or block.writes[0].source.name not in buffers:
                continue
            consumers = sch.get_consumers(rv)
            if consumers and not any(_is_reduction(sch.get(c)) for c in consumers):
                changed |= _try(sch.compute_inline, rv)


def _anchor_output(sch, outputs: list, shape: tuple[int, ...]):
    """The output block the plan's split refers to: the last one of the plan's output shape."""
    for rv in reversed(outputs):
        if tuple(int(d) for d in sch.get(rv).writes[0].source.shape) == tuple(shape):
            return rv
    raise Unsupported(f"no output of shape {shape}")


def _piece_loop(sch, store, splits: dict[int, int]):
    """Split the output copy's loops per ``splits`` and fuse the outer parts into one loop."""
    loops = sch.get_loops(store)
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
             if any(v.same_as(var) for v in _vars(value))}
    return any(v.name in moves for r in realize.block.reads if r.source.name == name
               for rng in r.region for v in _vars(rng.min))


def _read_index(sch, rv, name: str) -> int:
    return next(i for i, r in enumerate(sch.get(rv).reads) if r.source.name == name)


def _total_ops(model: dict) -> int:
    return sum(p["instances"] * e["ops"] for p in model["phases"] for e in p["events"]
               if e["kind"] == "compute")


def _smallest_factor(n: int) -> int:
    return next(q for q in range(2, n + 1) if n % q == 0)


def _same(sch, a, b) -> bool:
    return sch.get_sref(a).same_as(sch.get_sref(b))


def _blocks(func) -> list:
    out: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, out.append)], order="pre")
    return out


def _has_child(block) -> bool:
    found: list = []
    tvm_ffi.structural_walk(block.body, [(s_tir.SBlock, found.append)])
    return bool(found)


def _alloc_buffers(func) -> list:
    return [b for block in _blocks(func) for b in block.alloc_buffers]


def _block_names(func) -> list[str]:
    return [b.name_hint for b in _blocks(func) if b.name_hint != "root"]


def _realizes(func) -> dict:
    found: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, found.append)])
    return {r.block.name_hint: r for r in found}


def _vars(expr) -> list:
    out: list = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.Var, out.append)])
    return out


def _is_reduction(block) -> bool:
    return any(iv.iter_type == 2 for iv in block.iter_vars)


def _elem_bytes(buf) -> int:
    dtype = tvm.runtime.DataType(str(buf.dtype))
    return max(1, dtype.bits * dtype.lanes // 8)


def _buffer_bytes(buf) -> int:
    return math.prod(int(d) for d in buf.shape) * _elem_bytes(buf)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _try(primitive, *args, **kwargs) -> bool:
    try:
        primitive(*args, **kwargs)
        return True
    except s_tir.ScheduleError:
        return False

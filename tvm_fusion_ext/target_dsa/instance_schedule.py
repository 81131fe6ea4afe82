"""The choice of GraphTurbo's kernel for one sub-graph on the DSA (graphturbo-dsa-scheduling.txt
sections 3.1, 4, Fig. 15): candidates staged by :mod:`.instance_staging`, compared by simulation.

:func:`schedule_subgraph` chooses the pieces: dimensions whose split recomputes more than the
partitioner's bound (section 3.1) are not bound; the plan's instances times its binding come
first, then finer pieces until every core has one and a piece fits LB (only with instance
splitting on; Fig. 15's first two bars keep the binding's pieces and spill), the layer forms
over the whole output and over instances (the second bar: one image at a time), and the
candidate the simulator finds fastest is kept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import tvm_ffi
from tvm import s_tir, tirx

from ..partitioners.graphturbo.kernel_plan import KernelOptions, SubgraphPlan
from ..partitioners.graphturbo.memory import Tensor, allocate, live_peak
from ..partitioners.graphturbo.split_info import MAX_RECOMPUTE_RATIO
from ..tir_passes.analysis import compact_buffers, divisors
from .instance_staging import (
    WEIGHT_BUFFER_FRACTION,
    Placement,
    Unsupported,
    stage_layers,
    stage_pieces,
    stage_subgraph,
    unique_buffer_names,
)
from .kernel_model import DOUBLE_BUFFER, TILE, kernel_model, total_ops
from .simulator import fits, kernel_cycles
from .spec import DSASpec
from .tir_helpers import DDR, GB, LB, alloc_buffers, buffer_bytes, leaf_blocks, live_ranges

# Piece splits evaluated per sub-graph (each one a full schedule and simulation).
MAX_PIECE_TRIALS = 2
# A kernel with fewer DDR buffers is preferred while within this factor of the fastest's cycles.
ON_CHIP_TOLERANCE = 1.1
_LOG = logging.getLogger(__name__)
# (structural hash, plan JSON, spec) -> the kernel schedule_subgraph chose, or why it declined
_CHOSEN: dict = {}


@dataclass
class Staged:
    """One staged candidate: its TIR, kernel model, pieces, spills and simulated cycles."""

    func: tirx.PrimFunc
    model: dict
    splits: dict[int, int]
    placement: Placement
    cycles: int
    fits: bool
    form: str = "pieces"  # or "layers" (:func:`stage_layers`)

    @property
    def pieces(self) -> int:
        return math.prod(self.splits.values())


def schedule_subgraph(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan) -> Staged:
    """GraphTurbo's kernel for one sub-graph, chosen among its candidates by simulation
    (memoised per function, plan and spec).

    Candidates: with buffer stitching the per-core pieces (:func:`_search_pieces`); the
    layer-bound form (:func:`stage_layers`) over the whole output, and with instance splitting
    also over the plan's instances (BestSplit's factor rounded up to divide the extent, and a
    half and a quarter of it: fewer, larger instances re-read the weights less often and give
    each layer more tiles to spread over the cores) and, for a plan of one
    instance or split along an inner dimension, over the finest instances of the outermost
    (:func:`_finest_instances`); with buffer stitching each layer form also with its runs of
    layers stitched in LB where Algorithm 4's scopes allow; with buffer stitching but no
    instance splitting, where the layer form over the whole output spills to DDR, the layer form
    over one image at a time (:func:`_per_image`; a sub-graph's, not a chain's). Without
    stitching (Fig. 15's first bar, "LLB only") only the layer-bound form over the whole output
    is staged.

    An optimisation of Fig. 15 never makes a kernel slower: the kernel the same sub-graph gets
    one bar lower (:func:`_lesser`) is a candidate too, and candidates slower than it are
    dropped, so each bar is at least the one before it on every kernel (the second bar's
    per-image forms left out of that floor). Across-layer instruction scheduling (section 4.4)
    only overlaps DMA with compute, so the kernel without it, double buffered afterwards where
    the doubled DMA buffers still fit LB (:func:`_overlapped`), is one more candidate. Among the
    candidates that fit LB and GB, the fastest is kept unless one within
    :data:`ON_CHIP_TOLERANCE` of its cycles allocates fewer DDR buffers: GraphTurbo keeps
    tensors on chip when that costs (nearly) nothing. A sub-graph none of whose candidates fits
    is declined (:class:`Unsupported`).
    """
    return _schedule(func, spec, plan, _LayerForms())


# Fig. 15's bar (plan JSON) -> its own candidates (:func:`bar_candidates`), or what staging them raised
StagedElsewhere = dict[str, "list[Staged | None] | Exception"]


def bar_plans(plan: SubgraphPlan) -> list[SubgraphPlan]:
    """``plan`` and the plans of the Fig. 15 bars below it, whose kernels :func:`schedule_subgraph`
    stages too (:func:`_lesser`)."""
    plans = [plan]
    while (lesser := _lesser(plans[-1].options)) is not None:
        plans.append(dataclasses.replace(plan, options=lesser))
    return plans


def bar_candidates(task: tuple[tirx.PrimFunc, DSASpec, SubgraphPlan, bool]) -> list[Staged | None] | Exception:
    """The candidates one bar of ``(func, spec, plan, floor)`` stages itself (``floor``: as the
    bar below another, :func:`bar_plans` but the first), or why staging them failed: the bars of
    one sub-graph can be staged on separate workers, and :func:`schedule_subgraph_from` then
    chooses among them as :func:`schedule_subgraph` would."""
    func, spec, plan, floor = task
    try:
        return _candidates(unique_buffer_names(func), spec, plan, _LayerForms(), floor)
    except (Unsupported, s_tir.ScheduleError, ValueError) as err:
        return err


def schedule_subgraph_from(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan,
                           staged: StagedElsewhere) -> Staged:
    """:func:`schedule_subgraph` with each bar's candidates taken from ``staged`` (every plan of
    :func:`bar_plans`) instead of staging them here; the same choice, memoised alike."""
    return _schedule(func, spec, plan, _LayerForms(), staged)


def _schedule(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan, forms: _LayerForms,
              staged: StagedElsewhere | None = None, floor: bool = False) -> Staged:
    """:func:`schedule_subgraph` with the layer forms staged so far for ``func`` (or every bar's
    candidates, ``staged``); ``floor``: as the bar below another (:func:`_candidates`)."""
    key = (tvm_ffi.structural_hash(func), plan.to_json(), spec, floor)
    if key not in _CHOSEN:
        try:
            _CHOSEN[key] = _choose(func, spec, plan, forms, staged, floor)
        except (Unsupported, s_tir.ScheduleError, ValueError) as err:
            _CHOSEN[key] = err  # a declined sub-graph is declined again without staging
    if isinstance(_CHOSEN[key], Exception):
        raise _CHOSEN[key]
    return _CHOSEN[key]


def _choose(func: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan, forms: _LayerForms,
            staged: StagedElsewhere | None, floor: bool) -> Staged:
    """:func:`schedule_subgraph` without the memo."""
    if staged is None:
        candidates = _candidates(unique_buffer_names(func), spec, plan, forms, floor)
    elif isinstance(found := staged[plan.to_json()], Exception):
        raise found
    else:
        candidates = list(found)
    bound = None
    lesser = _lesser(plan.options)
    base = None
    if lesser is not None:
        try:
            base = _schedule(func, spec, dataclasses.replace(plan, options=lesser), forms, staged,
                             floor=True)
        except Unsupported as err:
            _LOG.info("graphturbo %s declined: %s", lesser, err)
    if base is not None:
        candidates.append(base)
        if plan.options.instruction_scheduling:
            candidates.append(_overlapped(base, spec))
        bound = base.cycles if base.fits else None
    candidates = [c for c in candidates if c is not None]
    if not candidates:
        raise Unsupported("no kernel form could be staged")
    fitting = [c for c in candidates if c.fits]
    if not fitting:  # a kernel that does not fit cannot run: DSASchedule stages it per kernel
        raise Unsupported("no candidate kernel fits LB and GB")
    if bound is not None:
        fitting = [c for c in fitting if c.cycles <= bound]
    fastest = min(c.cycles for c in fitting)
    near = [c for c in fitting if c.cycles <= ON_CHIP_TOLERANCE * fastest]
    return min(near, key=lambda c: (c.model["buffers"]["ddr"], c.cycles))


def _lesser(options: KernelOptions) -> KernelOptions | None:
    """The switches of the bar below ``options`` in Fig. 15: instruction scheduling off, else
    instance splitting off, else buffer stitching off; None for the first bar."""
    for switch in ("instruction_scheduling", "instances", "stitch"):
        if getattr(options, switch):
            return dataclasses.replace(options, **{switch: False})
    return None


def _candidates(func, spec: DSASpec, plan: SubgraphPlan, forms: _LayerForms,
                floor: bool = False) -> list[Staged | None]:
    """The candidates of :func:`schedule_subgraph` staged for ``plan`` as it is; ``floor``: as
    the bar below another, which stages no per-image form (:func:`_per_image`: the compile time
    of full-size models; the bars with instance splitting have their own instance forms)."""
    candidates = []
    if plan.options.stitch:
        candidates.append(_search_pieces(func, spec, plan))
    whole = forms.stage(func, spec, plan, 1)
    candidates.append(whole)
    steps = _base_steps(tuple(plan.output_shape), plan)
    if plan.options.instances and steps and steps[0][0] == plan.dim and plan.instances > 1:
        first = next((c for c in (forms.stage(func, spec, plan, n) for n in steps[0][1])
                      if c is not None), None)
        candidates.append(first)
        if first is not None:
            count = first.splits[plan.dim]
            candidates += [forms.stage(func, spec, plan, count // k) for k in (2, 4)
                           if count % k == 0 and count // k > 1]
    if plan.options.instances:
        candidates += [forms.stage(func, spec, outer, n) for outer, n in _finest_instances(plan)]
    if plan.options.stitch:  # each layer form again with its runs of layers stitched in LB
        candidates += [forms.stage(func, spec, dataclasses.replace(plan, dim=d), n, stitch_runs=True)
                       for c in candidates if c is not None and c.form == "layers"
                       for d, n in [next(iter(c.splits.items()), (plan.dim, 1))]]
    if plan.options.stitch and not plan.options.instances and not floor \
            and not plan.tensor_scopes and _spills_to_ddr(whole):
        candidates += [forms.stage(func, spec, along, n) for along, n in _per_image(plan)]
    return candidates


def _finest_instances(plan: SubgraphPlan) -> list[tuple[SubgraphPlan, int]]:
    """Layer forms over the finest instances, as ``(plan along their dimension, instances)``.

    Algorithm 1 (section 3.1) sizes an instance by the SG's peak divided by the factor, as if
    every tensor shrank with the split. Two cases where one core's LB holds far less than that
    promises: a plan of one instance (no single dimension's split fits, e.g. ResNet-50's 56 x 56
    layers at batch 64, or a layer the judge took apart), and a split along another dimension
    than the outermost, which shrinks no input a conv contracts (a 1x1 down-sampling conv split
    along its output channels re-reads its whole input per instance). For these, the layer form
    over an instance per index of the outermost dimension (per image) and over a quarter as many
    are candidates too (a plan of one instance: along its own dimension); :func:`stage_layers`
    tiles each instance's layers over the cores (section 4.1), and the simulator chooses
    (section 4: the kernel generator picks among implementations). Empty for a dimension of
    extent 1 and for a plan already split along its outermost dimension."""
    dim = plan.dim if plan.instances == 1 else 0
    if (plan.instances > 1 and plan.dim == 0) or dim >= len(plan.output_shape):
        return []
    extent = int(plan.output_shape[dim])
    along = dataclasses.replace(plan, dim=dim)
    return [(along, n) for n in dict.fromkeys((extent, extent // 4)) if n > 1 and extent % n == 0]


def _spills_to_ddr(staged: Staged | None) -> bool:
    """Whether the layer form ``staged`` leaves a layer output in DDR (section 4.3's spill), does
    not fit, or could not be staged: what tiling one image at a time (:func:`_per_image`) can
    remedy."""
    return (staged is None or not staged.fits
            or any(buf.scope() == DDR for buf in alloc_buffers(staged.func)))


def _per_image(plan: SubgraphPlan) -> list[tuple[SubgraphPlan, int]]:
    """Fig. 15's second bar (section 5.3: layer outputs "stay in L1 to the greatest extent")
    without instance splitting: the layer form tiled one index of the outermost dimension (one
    image) at a time, each layer of the tile over the cores (section 4.1). An image's layer
    outputs stay on chip: in LB where a run of layers stitches there (section 4.2), in GB
    otherwise, where the whole batch's would spill to DDR. BestSplit's instance counts and the
    order of instances across sub-graphs (sections 3.1-3.3) remain the next bar's. Empty for an
    outermost extent of 1."""
    extent = int(plan.output_shape[0]) if plan.output_shape else 1
    return [(dataclasses.replace(plan, dim=0), extent)] if extent > 1 else []


def _overlapped(staged: Staged, spec: DSASpec) -> Staged | None:
    """``staged`` with section 4.4 applied afterwards: every tile loop double buffered (the next
    tile's loads overlap this tile's work; the kernel's weight promotions are issued ahead of the
    layers), the schedule otherwise unchanged; None when the doubled DMA buffers do not fit LB or
    nothing was left to overlap."""

    def overlap(loop):
        annotations = dict(loop.annotations or {})
        if TILE not in annotations or int(annotations.get(DOUBLE_BUFFER, 0)):
            return loop
        annotations[DOUBLE_BUFFER] = 1
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                        loop.thread_binding, annotations, loop.step)

    func = tvm_ffi.structural_map(staged.func, [(tirx.For, overlap)])
    if func.same_as(staged.func):
        return None
    model = kernel_model(func)
    if not fits(model, spec, reuse=True):
        return None
    return Staged(func, model, staged.splits, staged.placement, kernel_cycles(model, spec), True,
                  staged.form)


class _LayerForms:
    """The layer forms (:func:`_layer_candidate`) staged for one sub-graph, shared by the bars of
    Fig. 15 that stage the same form. One :func:`schedule_subgraph` call stages one function on
    one spec, and its bars' plans differ only in their switches and (:func:`_finest_instances`)
    dimension; :func:`stage_layers` reads two of the switches, buffer stitching and instruction
    scheduling, and the dimension only when it splits, so the instance-splitting bar's forms of
    one instance are those of the buffer-stitching bar."""

    def __init__(self):
        self.staged: dict[tuple, Staged | None] = {}

    def stage(self, func, spec: DSASpec, plan: SubgraphPlan, instances: int,
              stitch_runs: bool = False) -> Staged | None:
        key = (instances, stitch_runs, plan.options.stitch, plan.options.instruction_scheduling,
               plan.dim if instances > 1 else None)
        if key not in self.staged:
            self.staged[key] = _layer_candidate(func, spec, plan, instances, stitch_runs)
        return self.staged[key]


def _layer_candidate(func, spec: DSASpec, plan: SubgraphPlan, instances: int,
                     stitch_runs: bool = False) -> Staged | None:
    try:
        staged = stage_layers(func, spec, plan, instances, stitch_runs)
        model = kernel_model(staged)
    except (Unsupported, RuntimeError, ValueError, TypeError) as err:  # as in _candidate
        _LOG.info("graphturbo layers x%d declined: %s", instances, err)
        return None
    splits = {plan.dim: instances} if instances > 1 else {}
    return Staged(staged, model, splits, Placement(), kernel_cycles(model, spec),
                  fits(model, spec, reuse=True), "layers")


def _search_pieces(func, spec: DSASpec, plan: SubgraphPlan) -> Staged | None:
    """The per-core pieces of the module docstring, the fastest of a short search.

    The plan's instances, then each factor of its binding, are applied one at a time (binding only
    without instance splitting); pieces are then refined one bindable dimension at a time
    (outermost first, by the smallest prime factor left). A step whose operations exceed
    :data:`MAX_RECOMPUTE_RATIO` times the unsplit kernel's is undone and its dimension is no longer
    split. Every refinement is staged and simulated; without instance splitting the refinement
    stops once every core has a piece, with it once a fitting candidate with a piece per core is
    no longer improved on.
    """
    shape = tuple(plan.output_shape)
    try:
        limit = MAX_RECOMPUTE_RATIO * total_ops(kernel_model(stage_pieces(func, spec, plan, {})))
    except (Unsupported, RuntimeError, ValueError, TypeError) as err:
        _LOG.info("graphturbo pieces declined: %s", err)
        return None
    bad: set[int] = set()
    splits: dict[int, int] = {}
    for d, factors in _base_steps(shape, plan):
        for f in factors:
            step = {**splits, d: splits.get(d, 1) * f}
            if shape[d] % step[d] == 0 and _within(func, spec, plan, step, limit):
                splits = step
                break
        else:
            bad.add(d)
    best = None
    for _ in range(MAX_PIECE_TRIALS):
        staged = _candidate(func, spec, plan, splits)
        _LOG.debug("graphturbo pieces %s: %s", splits, None if staged is None else
                   f"{staged.cycles} cycles, fits {staged.fits}, spill {sorted(staged.placement.spill)}")
        if staged is not None:
            if best is None or (staged.fits, -staged.cycles) > (best.fits, -best.cycles):
                best = staged
            elif best.fits and best.pieces >= spec.num_cores:
                break
            if not plan.options.instances and staged.pieces >= spec.num_cores:
                break
        while True:
            step = _refine(shape, splits, [d for d in range(len(shape)) if d not in bad])
            if step is None or _within(func, spec, plan, step, limit):
                break
            bad.add(next(d for d in step if step[d] != splits.get(d, 1)))
        if step is None:
            break
        splits = step
    return best


def _base_steps(shape: tuple[int, ...], plan: SubgraphPlan) -> list[tuple[int, list[int]]]:
    """The plan's instances along its dimension, then Algorithm 4's binding factor per dimension,
    each with the factors to try in order: a factor that does not divide the extent (Algorithm 1
    may pick one) or gives pieces whose regions are not rectangles through a reshape is replaced
    by the next larger divisor of the extent."""
    steps = []
    if plan.options.instances and plan.instances > 1 and plan.dim < len(shape):
        steps.append((plan.dim, [d for d in divisors(shape[plan.dim]) if d >= plan.instances][:3]))
    return steps + [(d, [f]) for d, f in enumerate(plan.binding[:len(shape)]) if f > 1]


def _within(func, spec: DSASpec, plan: SubgraphPlan, splits: dict[int, int], limit: float) -> bool:
    """Whether ``splits`` can be staged and recomputes at most ``limit`` operations."""
    try:
        return total_ops(kernel_model(stage_pieces(func, spec, plan, splits))) <= limit
    except (Unsupported, RuntimeError, ValueError, TypeError) as err:  # symbolic regions
        _LOG.info("graphturbo pieces %s declined: %s", splits, err)
        return False


def _refine(shape, splits: dict[int, int], bindable: list[int]) -> dict[int, int] | None:
    for d in bindable:
        left = shape[d] // splits.get(d, 1)
        if left > 1:
            return {**splits, d: splits.get(d, 1) * _smallest_factor(left)}
    return None


def _candidate(func, spec: DSASpec, plan: SubgraphPlan, splits: dict[int, int]) -> Staged | None:
    """Stage ``splits`` with the piece tensors placed by liveness (section 4.3); None if it
    cannot be staged."""
    try:
        light = stage_pieces(func, spec, plan, splits)
        intermediates = {b.name for b in alloc_buffers(func)}
        placement = _spill_plan(light, spec, plan, intermediates)
        staged = stage_subgraph(func, spec, plan, splits, placement)
        model = kernel_model(staged)
        if not fits(model, spec, reuse=True):  # chunks larger than reserved: spill every tensor
            placement = _spill_plan(light, spec, plan, intermediates, lb_bytes=0)
            staged = stage_subgraph(func, spec, plan, splits, placement)
            model = kernel_model(staged)
    except (Unsupported, RuntimeError, ValueError, TypeError) as err:  # TVM: RuntimeError; symbolic: Value/TypeError
        _LOG.info("graphturbo pieces %s declined: %s", splits, err)
        return None
    return Staged(staged, model, splits, placement, kernel_cycles(model, spec),
                  fits(model, spec, reuse=True), "pieces")


def _spill_plan(light: tirx.PrimFunc, spec: DSASpec, plan: SubgraphPlan, intermediates: set[str],
                lb_bytes: int | None = None) -> Placement:
    """Section 4.3 over one piece. Its tensors are the layer outputs (``intermediates``), the
    activation inputs staged per piece and the outputs written per piece, each live from the first
    to the last computation touching it (leaf blocks in program order), doubled when it is a DMA
    target of a double-buffered piece. :func:`allocate` places them into LB less the anchors'
    reserved chunk buffers (``lb_bytes`` overrides) and one core's share of GB, spilling the
    longest-lived first."""
    compacted = compact_buffers(light)
    params = {p.name for p in compacted.params}
    leaves = leaf_blocks(compacted)
    double = plan.options.instruction_scheduling
    key: dict[str, str] = {}
    for leaf in leaves:
        src = leaf.reads[0].source if len(leaf.reads) == 1 else None
        dst = leaf.writes[0].source if leaf.writes else None
        if src is not None and dst is not None and src.name in params and dst.scope() == LB:
            key[dst.name] = src.name  # an activation input staged per piece
        if src is not None and dst is not None and dst.name in params and src.scope() == LB:
            key[src.name] = dst.name  # an output written per piece
    sizes = {}
    for buf in alloc_buffers(compacted):
        if buf.name in intermediates or buf.name in key:
            twice = double and buf.name in key and key[buf.name] != buf.name
            sizes[buf.name] = buffer_bytes(buf) * (2 if twice else 1)
            key.setdefault(buf.name, buf.name)
    first, last = live_ranges(leaves)
    if lb_bytes is None:
        lb_bytes = spec.lb_bytes - (2 if double else 1) * (spec.lb_bytes // WEIGHT_BUFFER_FRACTION)
    tensors = [Tensor(key[n], size, first.get(n, 0), last.get(n, 0)) for n, size in sizes.items()]
    gb_share = spec.gb_bytes // spec.cores_per_cluster
    result = allocate(tensors, len(leaves), max(0, lb_bytes), gb_share)
    scope = {"GB": GB, "DDR": DDR}
    spill = {name: scope[level] for name, level in result.level.items() if level != "LB"}
    return Placement(spill, result.lb_peak, live_peak(tensors, result.level, len(leaves), "GB"))


def _smallest_factor(n: int) -> int:
    return next(q for q in range(2, n + 1) if n % q == 0)

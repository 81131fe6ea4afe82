"""Deterministic timing model of kernels on a :class:`DSASpec` (documented in ``docs/dsa.md``).

Input: kernel models (:func:`.kernel_model.kernel_model`, one per PrimFunc) and the sequence of
kernel calls. Everything is integer cycles (exact ``Fraction`` arithmetic, one ``ceil`` per
event), so hand-computed cases match exactly.

Per phase of a kernel with ``T`` tiles bound to ``P`` cores, ``A = min(T, P)`` cores are active and
each core runs ``n = ceil(T / P)`` tiles. One tile's events cost:

* DMA ``src -> dst`` of ``B`` bytes in ``x`` transfers: ``ceil(B / r) + x * dma_latency`` with
  ``r = min(rate(src), rate(dst))``; ``rate(ddr) = ddr_bw / A`` (DDR shared by the active cores),
  ``rate(gb) = gb_bw / min(A, cores_per_cluster)`` (GB shared within a cluster), ``rate(lb) = lb_bw``;
  a DMA towards a faster level (DDR -> GB -> LB) is a *load*, the other way a *store*;
* compute of ``N`` operations on unit ``U``: ``ceil(N / U.ops_per_cycle)`` - on a matrix unit at
  least ``ceil(M * N * K / U.ops_per_cycle)`` per instruction (``calls``), partly filled or not -,
  plus for each *direct* access of ``B`` bytes to DDR/GB by the unit ``ceil(B / rate(level))``
  (the unit stalls).

Each event goes to a queue (GraphTurbo section 4.4, Fig. 13: DMA and the compute units run
side by side): ``dma_in`` for loads, ``dma_out`` for stores (one ``dma_in`` queue for both on a
chip with one DMA engine), and one queue per compute unit (vector, VME, MME, scalar).

Without double buffering (``dsa.double_buffer`` off: instructions issued one after another) a
core spends ``n * E`` on its ``n`` tiles, ``E`` the sum of one tile's events. With it (the
section 4.4 instruction scheduler), one tile is list-scheduled: each event starts when its
queue has finished the events before it in program order and the events in its ``deps`` have
finished, so independent work on different queues overlaps (a matrix op beside an independent
vector op takes the longer of the two, a dependent pair their sum); the next tiles are
pipelined behind it (double-buffered LB), so a core spends ``M + (n - 1) * max_q busy(q)``,
``M`` the makespan of one tile and ``busy(q)`` one tile's cycles on queue ``q``. For a tile
whose loads ``L``, compute ``C`` (one unit) and stores ``S`` depend on each other in that
order this is ``L + C + S + (n - 1) * max(L, C, S)`` on two DMA engines and
``L + C + S + (n - 1) * max(C, L + S)`` on one. Events inside a loop of the tile (``steps``
iterations: a GEMM's reduction chunks, each staging its operands) are pipelined the same way
within the tile: one iteration's makespan ``m`` (its events' cycles over ``steps``), then
``(steps - 1)`` times its busiest queue, plus the tile's other events one after another; for
chunk loads ``L``, chunk compute ``C`` and a store ``S`` after the loop that is
``(L + C) / s + (s - 1) * max(L, C) / s + S``. A phase inside a sub-graph's instance loop
(``repeat`` in its model) costs that many times. A kernel takes ``launch_cycles + sum(phases)``;
the program is the sum over its kernel calls.

An instance loop with double buffering (the phases of one ``overlap_group``, each repeated ``n``
times) fetches the next instance's GB data during this instance's other phases (section 4.4):
with ``P`` the cycles of its ``prefetch`` phases and ``R`` those of the others per instance, it
takes ``P + R + (n - 1) * max(P, R, D)``, where ``D`` is one instance's DDR bytes over the whole
DDR bandwidth (prefetch and the other phases share DDR).

Promotions issued ahead of the layers (a top-level phase whose events carry ``needed_by``, section
4.4: "the latency of these promotion statements can be hidden behind an earlier executed layer")
go to a promotion queue in the order of their first use, each costing what it costs in its phase.
A phase (in an overlapped instance loop: its first instance) starts once the promotions it or an
earlier phase needs are done; while it runs, the queue advances by the cycles it leaves DDR idle
(its cycles less its DDR bytes over the whole DDR bandwidth), as the instance loop's prefetch
shares DDR with the other phases. What is left runs before the kernel ends. Promotions that the
first phase needs cost what they did in program order; nothing else waits for them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from .kernel_model import LEVELS, MOVEMENTS
from .spec import DSASpec

_ORDER = {level: i for i, level in enumerate(LEVELS)}
DMA_IN = "dma_in"  # loads towards LB; the only DMA queue on a chip with one DMA engine
DMA_OUT = "dma_out"  # stores away from LB, on the second DMA engine


def phase_cycles(phase: dict, spec: DSASpec, busy: dict | None = None,
                 traffic: dict | None = None) -> int:
    """Cycles of one phase, all its repeats; adds unit busy cycles and bytes per level into
    ``busy``/``traffic``."""
    return int(phase.get("repeat", 1)) * _one_repeat(phase, spec, busy, traffic)


def _tiling(phase: dict, spec: DSASpec) -> tuple[int, dict]:
    """Tiles per core of a phase, and the bytes per cycle of each level to one active core."""
    tiles = int(phase["instances"])
    cores = max(1, min(int(phase["cores"]), spec.num_cores))
    active = max(1, min(tiles, cores))
    return math.ceil(tiles / cores), {
        "ddr": spec.bytes_per_cycle("ddr") / active,
        "gb": spec.bytes_per_cycle("gb") / min(active, spec.cores_per_cluster),
        "lb": spec.bytes_per_cycle("lb"),
    }


def _dma_cycles(event: dict, rate: dict, spec: DSASpec) -> int:
    """Cycles of one DMA event: its bytes at the slower end's rate, plus a latency per transfer."""
    nbytes = int(event["bytes"])
    return math.ceil(Fraction(nbytes) / min(rate[event["src"]], rate[event["dst"]])) + \
        int(event["transfers"]) * spec.dma_latency_cycles


def _one_repeat(phase: dict, spec: DSASpec, busy: dict | None, traffic: dict | None) -> int:
    """Cycles of one repeat of a phase; ``busy``/``traffic`` get all its repeats."""
    tiles = int(phase["instances"])
    per_core, rate = _tiling(phase, spec)
    events = phase["events"]
    queues, durations = [], []
    unit_cycles: dict[str, int] = defaultdict(int)
    tile_bytes: dict[str, int] = defaultdict(int)
    for event in events:
        kind = event["kind"]
        if kind == "dma":
            src, dst, nbytes = event["src"], event["dst"], int(event["bytes"])
            cycles = _dma_cycles(event, rate, spec)
            queue = DMA_OUT if _ORDER[dst] < _ORDER[src] and spec.dma_engines >= 2 else DMA_IN
            tile_bytes[src] += nbytes
            tile_bytes[dst] += nbytes
            if "movement" in event:
                tile_bytes[event["movement"]] += nbytes
        elif kind == "compute":
            unit = spec.unit_for(event["unit_kind"])
            own = _compute_cycles(event, unit)
            unit_cycles[unit.name] += own
            cycles = own
            for level, nbytes in event.get("direct", {}).items():
                cycles += math.ceil(Fraction(int(nbytes)) / rate[level])
                tile_bytes[level] += int(nbytes)
            queue = unit.name
        else:
            raise ValueError(f"unknown event kind {kind!r}")
        queues.append(queue)
        durations.append(cycles)
    if phase["double_buffer"]:
        steps = max((int(e.get("steps", 1)) for e in events), default=1)
        if steps > 1:
            first, occupancy = _pipelined_tile(events, queues, durations, steps)
        else:
            first, occupancy = _list_schedule(events, queues, durations)
        cycles = first + (per_core - 1) * max(occupancy.values(), default=0)
    else:
        cycles = per_core * sum(durations)
    repeat = int(phase.get("repeat", 1))
    if busy is not None:
        for name, value in unit_cycles.items():
            busy[name] += repeat * tiles * value
        busy["dma"] += repeat * tiles * sum(d for d, q in zip(durations, queues) if q in (DMA_IN, DMA_OUT))
    if traffic is not None:
        for key, value in tile_bytes.items():
            traffic[key] = traffic.get(key, 0) + repeat * tiles * value
    return cycles


def _compute_cycles(event: dict, unit) -> int:
    """Cycles of a compute event on ``unit``: its operations at the unit's rate, and at least one
    full instruction per matrix-unit call (``calls``), however few of the instruction's rows,
    columns or reduction steps it uses."""
    cycles = math.ceil(Fraction(int(event["ops"]), unit.ops_per_cycle))
    if unit.matrix_shape is not None and "calls" in event:
        per_call = math.ceil(Fraction(math.prod(unit.matrix_shape), unit.ops_per_cycle))
        cycles = max(cycles, int(event["calls"]) * per_call)
    return cycles


def _list_schedule(events: list[dict], queues: list[str], durations: list[int]) -> tuple[int, dict]:
    """One tile under section 4.4's instruction scheduling: every event goes to its queue's
    in-order stream and starts once that queue is free and the events in its ``deps`` finished.
    Returns the tile's makespan and each queue's busy cycles (the per-tile bound of the steady
    state once tiles are pipelined)."""
    free: dict[str, int] = defaultdict(int)
    occupancy: dict[str, int] = defaultdict(int)
    finish: list[int] = []
    for event, queue, cycles in zip(events, queues, durations):
        start = max([free[queue], *(finish[d] for d in event.get("deps", ()))])
        finish.append(start + cycles)
        free[queue] = start + cycles
        occupancy[queue] += cycles
    return max(finish, default=0), occupancy


def _pipelined_tile(events: list[dict], queues: list[str], durations: list[int],
                    steps: int) -> tuple[int, dict]:
    """One double-buffered tile whose events inside a loop of ``steps`` iterations (``steps`` in
    their model) are pipelined iteration after iteration: one iteration (each of those events'
    cycles over ``steps``) is list-scheduled, the next ones follow at the busiest queue's pace
    (the next iteration's loads overlap this one's compute), and the tile's other events (an
    accumulator's initialisation, the store) are issued one after another around them. Returns
    the tile's makespan and each queue's busy cycles over the whole tile."""
    body = [i for i, event in enumerate(events) if int(event.get("steps", 1)) == steps]
    position = {i: k for k, i in enumerate(body)}
    iteration = [{"deps": [position[d] for d in events[i].get("deps", ()) if d in position]}
                 for i in body]
    per_step = [math.ceil(Fraction(durations[i], steps)) for i in body]
    first, step_busy = _list_schedule(iteration, [queues[i] for i in body], per_step)
    others = sum(d for i, d in enumerate(durations) if i not in position)
    occupancy: dict[str, int] = defaultdict(int)
    for queue, cycles in zip(queues, durations):
        occupancy[queue] += cycles
    return first + (steps - 1) * max(step_busy.values()) + others, occupancy


def kernel_cycles(model: dict, spec: DSASpec, busy: dict | None = None,
                  traffic: dict | None = None) -> int:
    """Cycles of one call of a kernel: launch overhead plus its phases, in order (the phases of
    an overlapped instance loop and the promotions issued ahead as the module docstring says)."""
    total = spec.launch_cycles
    phases = model["phases"]
    ahead = _PromotionQueue()
    i = 0
    while i < len(phases):
        group = phases[i].get("overlap_group")
        if group is None and _issued_ahead(phases[i]):
            phase_cycles(phases[i], spec, busy, traffic)  # its unit busy cycles and bytes
            per_core, rate = _tiling(phases[i], spec)
            ahead.add([(int(e["needed_by"]), per_core * _dma_cycles(e, rate, spec))
                       for e in phases[i]["events"]])
            i += 1
            continue
        if group is None:
            total += ahead.wait(i)
            moved: dict[str, int] = defaultdict(int)
            cycles = phase_cycles(phases[i], spec, busy, moved)
            ahead.advance(cycles - _ddr_cycles(moved["ddr"], spec))
            _add_traffic(traffic, moved)
            total += cycles
            i += 1
            continue
        end = i + 1
        while end < len(phases) and phases[end].get("overlap_group") == group:
            end += 1
        total += _overlapped_cycles(phases[i:end], spec, busy, traffic, ahead, i)
        i = end
    return total + ahead.wait(len(phases))


def _add_traffic(traffic: dict | None, moved: dict) -> None:
    """Add the bytes per level in ``moved`` into ``traffic`` (when one is kept)."""
    if traffic is not None:
        for key, value in moved.items():
            traffic[key] = traffic.get(key, 0) + value


def _ddr_cycles(nbytes, spec: DSASpec) -> int:
    """Cycles of ``nbytes`` of DDR traffic at the whole DDR bandwidth."""
    return math.ceil(Fraction(nbytes) / spec.bytes_per_cycle("ddr"))


def _issued_ahead(phase: dict) -> bool:
    """Whether a phase holds promotions issued ahead of the layers (module docstring)."""
    return bool(phase["events"]) and all("needed_by" in e for e in phase["events"])


class _PromotionQueue:
    """Promotions issued ahead, in the order of their first use: ``[needed_by, cycles left]``."""

    def __init__(self):
        self.pending: list[list[int]] = []

    def add(self, promotions: list[tuple[int, int]]) -> None:
        self.pending = sorted(self.pending + [list(p) for p in promotions], key=lambda p: p[0])

    def wait(self, phase: int) -> int:
        """The cycles until every promotion needed by ``phase`` or earlier is done (removed)."""
        needed = [p for p in self.pending if p[0] <= phase]
        self.pending = self.pending[len(needed):]
        return sum(p[1] for p in needed)

    def advance(self, cycles: int) -> None:
        """Run the queue for ``cycles`` beside a phase."""
        while cycles > 0 and self.pending:
            done = min(cycles, self.pending[0][1])
            self.pending[0][1] -= done
            cycles -= done
            if self.pending[0][1] == 0:
                self.pending.pop(0)


def _overlapped_cycles(phases: list[dict], spec: DSASpec, busy: dict | None,
                       traffic: dict | None, ahead: _PromotionQueue, first: int) -> int:
    """One double-buffered instance loop (module docstring); its phases are ``first`` on in the
    kernel's, and its first instance waits for and runs beside the promotions in ``ahead``."""
    repeat = int(phases[0].get("repeat", 1))
    prefetch = rest = waited = 0
    ddr: dict[str, int] = defaultdict(int)
    for k, phase in enumerate(phases):
        waited += ahead.wait(first + k)
        before = ddr["ddr"]
        cycles = _one_repeat(phase, spec, busy, ddr)
        ahead.advance(cycles - _ddr_cycles(Fraction(ddr["ddr"] - before, repeat), spec))
        if phase.get("prefetch"):
            prefetch += cycles
        else:
            rest += cycles
    _add_traffic(traffic, ddr)
    shared_ddr = _ddr_cycles(Fraction(ddr["ddr"], repeat), spec)
    steady = (repeat - 1) * max(prefetch, rest, shared_ddr)
    ahead.advance(steady - (repeat - 1) * shared_ddr)
    return waited + prefetch + rest + steady


def simulate(models: dict[str, dict], calls: list[str], spec: DSASpec) -> dict:
    """The profile of running ``calls`` (kernel names, in order) on ``spec``.

    Returns ``{"kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers": {"ddr", "gb", "lb"},
    "movement_bytes": {"copy", "redistribute"}, "cycles", "time_ms", "unit_busy": {unit: cycles},
    "per_kernel": [...]}`` (``movement_bytes``: the bytes of section 3.5's data movement ops,
    also counted in the levels they move between).
    """
    busy: dict[str, int] = {u.name: 0 for u in spec.units}
    busy["dma"] = 0
    traffic: dict[str, int] = dict.fromkeys((*LEVELS, *MOVEMENTS), 0)
    buffers = dict.fromkeys(LEVELS, 0)
    per_kernel = []
    total = 0
    for name in calls:
        model = models[name]
        kernel_traffic: dict[str, int] = dict.fromkeys((*LEVELS, *MOVEMENTS), 0)
        cycles = kernel_cycles(model, spec, busy, kernel_traffic)
        for key in traffic:
            traffic[key] += kernel_traffic[key]
        for level in LEVELS:
            buffers[level] += int(model["buffers"][level])
        total += cycles
        per_kernel.append({"name": name, "cycles": cycles,
                           **{f"{level}_bytes": kernel_traffic[level] for level in LEVELS}})
    return {
        "kernels": len(calls),
        "ddr_bytes": traffic["ddr"], "gb_bytes": traffic["gb"], "lb_bytes": traffic["lb"],
        "buffers": buffers,
        "movement_bytes": {kind: traffic[kind] for kind in MOVEMENTS},
        "cycles": total,
        "time_ms": spec.cycles_to_ms(total),
        "unit_busy": busy,
        "per_kernel": per_kernel,
    }


def fits(model: dict, spec: DSASpec, reuse: bool = False) -> bool:
    """Whether a kernel's LB (per core, doubled for double-buffered DMA targets) and GB fit.

    LB and GB count every allocation at once, or with ``reuse`` (GraphTurbo kernels, section 4.3)
    only the buffers live at the same time. GB allocated inside a tile loop is per tile, held at
    once by every core of a cluster running one.
    """
    double = any(p["double_buffer"] for p in model["phases"])
    footprint = model["footprint"]
    key = ("lb_live" if reuse else "lb") + ("_double_buffered" if double else "")
    per_tile = footprint.get("gb_per_tile", 0)
    concurrent = max(1, min(spec.cores_per_cluster,
                            max((int(p["cores"]) for p in model["phases"]), default=1)))
    if reuse:
        gb = footprint["gb_live"] + footprint["gb_per_tile_live"] * concurrent
    else:
        gb = footprint["gb"] - per_tile + per_tile * concurrent
    return footprint[key] <= spec.lb_bytes and gb <= spec.gb_bytes

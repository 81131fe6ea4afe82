"""What the simulator needs from one kernel, read from its scheduled TIR (no hardware numbers).

A kernel's TIR states the DSA memory hierarchy explicitly (GraphTurbo section 1, Fig. 1):

* every buffer has a scope: kernel parameters and ``global`` buffers live in DDR,
  ``global.dsa_gb`` in the cluster's GB, ``local.dsa_lb`` (and other ``local``/``shared``
  scopes) in a core's LB;
* a leaf block whose body copies one buffer into another of a different level is a DMA transfer;
  every other leaf block is compute, mapped to a unit kind: ``matrix`` for a call of the matrix
  intrinsic (:mod:`.intrinsics`; its ``calls`` count the instructions), ``vmac`` for a
  multiply-accumulate update, ``vector`` otherwise;
  compute that reads or writes DDR / GB directly carries those bytes as its ``direct`` accesses;
* the events of one tile keep program order, each listing in ``deps`` the earlier events it must
  follow (a read or write after another event's write, a write after its read, through the
  blocks' ``T.reads`` / ``T.writes``): what an instruction scheduler may not reorder (section 4.4);
* a loop annotated ``dsa.tile`` spreads its iterations (tiles) over ``dsa.cores`` cores; with
  ``dsa.double_buffer`` the DMA of one tile overlaps the compute of another (section 4.4), and
  so do the iterations of a loop inside the tile around a statement sequence that loads (a DMA
  towards a faster level; the innermost such loop; its events, at any depth below it, carry ``steps``: a GEMM's
  reduction chunks, each staging its operands);
* a top-level loop annotated ``dsa.instances`` runs its body once per sub-graph instance
  (GraphTurbo section 3.3): each statement of its body is a phase repeated that many times; with
  ``dsa.double_buffer`` its *prefetch* phases (DMA into GB only) for the next instance overlap
  the other phases of this one (section 4.4), and the GB buffers they fill count twice;
* a top-level phase of DMA into GB only (the weight promotions at the start of a kernel) with
  ``dsa.double_buffer`` is issued ahead of the layers (section 4.4: a promotion hides behind an
  earlier layer): each of its events names in ``needed_by`` the first later phase that reads
  what it fills (the number of phases when none does);
* a buffer in scope ``global.dsa_gb.slice<k>`` is split across ``k`` clusters: each cluster's GB
  holds one slice (``1/k`` of its bytes), filled and read only by that cluster's tiles;
* a DMA event names the ``tensor`` it moves (the buffer at its end farther from the cores) and, for a block
  annotated :data:`MOVEMENT`, the section 3.5 data movement op it is (``movement``).

:func:`kernel_model` returns, per top-level statement (a *phase*), the tile count and the events
of one tile, plus the buffers per scope (DDR: the outputs it writes and the DDR buffers it
allocates) and the per-core LB footprint. Buffer sizes are the
compacted ones TVM's own ``CompactBufferAllocation`` computes, i.e. what lowering allocates.
"""

from __future__ import annotations

import math
from collections import defaultdict

import tvm
from tvm import s_tir, tirx

from ..analysis.primitive_types import indexed_by_data
from ..tir_passes.analysis import compact_buffers
from .tir_helpers import DDR, GB, elem_bytes, has_child_block

LEVELS = ("ddr", "gb", "lb")
TILE = "dsa.tile"
CORES = "dsa.cores"
DOUBLE_BUFFER = "dsa.double_buffer"
INSTANCES = "dsa.instances"
# Block annotation naming the data movement op a DMA block is (GraphTurbo section 3.5, Fig. 9):
# ``copy`` moves a tensor to another memory scope under the same binding (a layer's tile LB -> GB),
# ``redistribute`` brings it to a consumer bound differently (GB -> the consumer tile's LB).
MOVEMENT = "dsa.movement"
MOVEMENTS = ("copy", "redistribute")
MATRIX_CALL_PREFIX = "dsa_mme_gemm"
GB_SLICE_SCOPE = f"{GB}.slice"

_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
          tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And,
          tirx.Or, tirx.Not, tirx.Select)


def level_of(scope: str) -> str:
    """Memory level of a storage scope: ``ddr``, ``gb`` or ``lb``."""
    if scope in ("", DDR):
        return "ddr"
    if scope == GB or scope.startswith(f"{GB}."):
        return "gb"
    if scope.startswith(("local", "shared", "warp")):
        return "lb"
    return "ddr"


def sliced_scope(slices: int) -> str:
    """The GB scope of a buffer split across ``slices`` clusters (module docstring)."""
    return f"{GB_SLICE_SCOPE}{slices}"


def gb_slices(scope: str) -> int:
    """Into how many cluster slices a buffer of ``scope`` is split (1 unless sliced)."""
    suffix = scope[len(GB_SLICE_SCOPE):] if scope.startswith(GB_SLICE_SCOPE) else ""
    return int(suffix) if suffix.isdigit() else 1


def kernel_model(func: tirx.PrimFunc, name: str = "main") -> dict:
    """The JSON-able model of one scheduled PrimFunc (see the module docstring)."""
    compacted = compact_buffers(func)
    walker = _Walker({p for p in compacted.params})
    walker.run(compacted)
    written = walker.written_params
    return {
        "name": name,
        "phases": walker.phases,
        "buffers": {"ddr": len(written) + walker.allocs["ddr"], "gb": walker.allocs["gb"],
                    "lb": walker.allocs["lb"]},
        "footprint": {"lb": walker.footprint["lb"], "gb": walker.footprint["gb"],
                      "lb_double_buffered": walker.footprint["lb_db"],
                      "lb_live": walker.footprint["lb_live"],
                      "lb_live_double_buffered": walker.footprint["lb_live_db"],
                      "gb_live": walker.footprint["gb_live"],
                      "gb_per_tile": walker.footprint["gb_tile"],
                      "gb_per_tile_live": walker.footprint["gb_tile_live"]},
    }


def total_ops(model: dict) -> int:
    """Operations of every compute event of a kernel model, over all its tiles."""
    return sum(p["instances"] * e["ops"] for p in model["phases"] for e in p["events"]
               if e["kind"] == "compute")


class _Phase:
    """One phase: the events of one tile in program order, each with the earlier events it
    depends on (GraphTurbo section 4.4: the instruction scheduler may only reorder independent
    instructions)."""

    def __init__(self, repeat: int = 1, group=None):
        self.repeat = repeat
        self.group = group
        self.instances = 1
        self.cores = 1
        self.double_buffer = False
        self.events: list[dict] = []
        self.reads: set = set()  # every buffer an event reads
        self.destinations: list = []  # per event, the first buffer it writes
        self._writer: dict = {}  # buffer -> index of the last event writing it
        self._readers: dict = defaultdict(list)  # buffer -> events reading it since that write

    def add(self, event: dict, reads, writes, steps: int = 1) -> None:
        """Append ``event`` (one leaf block) reading ``reads`` and writing ``writes``; its
        ``deps`` are the events it must follow: the last writer of what it reads or writes
        (read/write after write) and the readers of what it overwrites (write after read).
        ``steps``: iterations of the loops around the innermost statement sequence holding it
        that loads, inside the tile (a GEMM's reduction chunks, each staging its operands, with
        the loops nested in them), recorded when above one."""
        if steps > 1:
            event["steps"] = steps
        self.reads.update(reads)
        self.destinations.append(writes[0] if writes else None)
        index = len(self.events)
        deps = {self._writer[b] for b in (*reads, *writes) if b in self._writer}
        for buf in writes:
            deps.update(self._readers[buf])
        deps.discard(index)
        for buf in reads:
            self._readers[buf].append(index)
        for buf in writes:
            self._writer[buf] = index
            self._readers[buf] = []
        if deps:
            event["deps"] = sorted(deps)
        self.events.append(event)

    def as_dict(self) -> dict:
        out = {"instances": self.instances, "cores": self.cores,
               "double_buffer": self.double_buffer, "events": self.events}
        if self.repeat != 1:
            out["repeat"] = self.repeat
        if self.group is not None and self.group[1]:
            out["overlap_group"] = self.group[0]
            out["prefetch"] = self.prefetch
        return out

    @property
    def prefetch(self) -> bool:
        """Only DMA into GB: what an overlapped instance loop fetches ahead (section 4.4)."""
        return bool(self.events) and all(e["kind"] == "dma" and e["dst"] == "gb"
                                         for e in self.events)


class _Walker:
    def __init__(self, params):
        self.params = params
        self.phases: list[dict] = []
        self.allocs = defaultdict(int)
        self.footprint = defaultdict(int)
        self.written_params: set = set()
        self.dma_destinations: set = set()
        self.lb_buffers: dict = {}
        self.gb_buffers: dict = {}  # allocated outside tile loops
        self.tile_gb_buffers: dict = {}
        self.touched: list[list] = []  # LB / per-tile GB buffers each leaf touches, in order
        self.groups = 0  # instance loops seen
        self.prefetched: set = set()  # GB buffers filled ahead by overlapped instance loops
        self._phase_writes: set = set()

    def run(self, func: tirx.PrimFunc) -> None:
        body = func.body
        root = body.block if isinstance(body, s_tir.SBlockRealize) else None
        stmts = [body]
        if root is not None:
            self._alloc(root, in_tile=False)
            stmts = _seq(root.body)
        walked: list[_Phase] = []
        for stmt, repeat, group in self._phase_stmts(stmts, 1, None):
            phase = _Phase(repeat, group)
            self._phase_writes = set()
            self._walk(stmt, phase, trip=1, seq_trip=1, in_tile=False)
            if phase.events:
                self.phases.append(phase.as_dict())
                walked.append(phase)
                if group is not None and group[1] and phase.prefetch:
                    self.prefetched |= {b for b in self._phase_writes if b in self.gb_buffers}
        for index, phase in enumerate(walked):
            if phase.group is None and phase.double_buffer and phase.prefetch:
                for event, dst in zip(phase.events, phase.destinations):
                    event["needed_by"] = next((j for j in range(index + 1, len(walked))
                                               if dst in walked[j].reads), len(walked))
        self.footprint["lb_db"] = sum(
            size * (2 if key in self.dma_destinations else 1) for key, size in self.lb_buffers.items())
        self.footprint["lb_live"] = self._live_peak(self.lb_buffers, double=False)
        self.footprint["lb_live_db"] = self._live_peak(self.lb_buffers, double=True)
        self.footprint["gb_live"] = self._live_peak(self.gb_buffers, double=True,
                                                    doubled=self.prefetched)
        self.footprint["gb_tile_live"] = self._live_peak(self.tile_gb_buffers, double=False)

    def _phase_stmts(self, stmts, repeat: int, group):
        """Top-level statements with their repeat count and instance loop ``(id, overlapped)``; a
        ``dsa.instances`` loop contributes the statements of its body (through blocks that only
        allocate), repeated ``extent`` times."""
        for stmt in stmts:
            annotations = dict(stmt.annotations) if isinstance(stmt, tirx.For) and \
                stmt.annotations is not None else {}
            if INSTANCES not in annotations:
                yield stmt, repeat, group
                continue
            self.groups += 1
            group = (self.groups, bool(int(annotations.get(DOUBLE_BUFFER, 0))))
            body = stmt.body
            while isinstance(body, s_tir.SBlockRealize) and has_child_block(body.block):
                self._alloc(body.block, in_tile=False)
                body = body.block.body
            yield from self._phase_stmts(_seq(body), repeat * _int(stmt.extent), group)

    def _live_peak(self, buffers: dict, double: bool, doubled: set | None = None) -> int:
        """Peak bytes of ``buffers`` when each occupies memory only from the first to the last
        leaf block touching it, in program order (GraphTurbo section 4.3's release after last
        use); with ``double`` the buffers in ``doubled`` (default: the DMA destinations) count
        twice."""
        doubled = self.dma_destinations if doubled is None else doubled
        first, last = {}, {}
        for i, bufs in enumerate(self.touched):
            for buf in bufs:
                if buf in buffers:
                    first.setdefault(buf, i)
                    last[buf] = i
        delta = [0] * (len(self.touched) + 1)
        for buf, start in first.items():
            size = buffers[buf] * (2 if double and buf in doubled else 1)
            delta[start] += size
            delta[last[buf] + 1] -= size
        peak = live = 0
        for change in delta:
            live += change
            peak = max(peak, live)
        return peak

    def _alloc(self, block, in_tile: bool) -> None:
        for buf in block.alloc_buffers:
            level = level_of(buf.scope())
            size = _bytes(buf) // gb_slices(buf.scope())
            self.allocs[level] += 1
            if level in ("gb", "lb"):
                self.footprint[level] += size
            if level == "gb" and in_tile:
                self.footprint["gb_tile"] += size
                self.tile_gb_buffers[buf] = size
            elif level == "gb":
                self.gb_buffers[buf] = size
            if level == "lb":
                self.lb_buffers[buf] = size

    def _walk(self, stmt, phase: _Phase, trip: int, seq_trip: int, in_tile: bool,
              steps: int = 1) -> None:
        """``trip``: iterations of the loops around ``stmt`` (inside the tile once in it);
        ``seq_trip``: those around the innermost statement sequence holding it (one DMA transfer
        each); ``steps``: those around the innermost sequence holding it that loads into a faster
        level itself (:func:`_loads`), the iterations a double-buffered tile pipelines (a GEMM's
        reduction chunks, the loops nested in them included)."""
        if isinstance(stmt, tirx.SeqStmt):
            if in_tile and any(_loads(child) for child in stmt.seq):
                steps = trip
            for child in stmt.seq:
                self._walk(child, phase, trip, trip, in_tile, steps)
        elif isinstance(stmt, tirx.For):
            extent = _int(stmt.extent)
            annotations = dict(stmt.annotations) if stmt.annotations is not None else {}
            if TILE in annotations and not in_tile:
                phase.instances = trip * extent
                phase.cores = int(annotations.get(CORES, 1))
                phase.double_buffer = bool(int(annotations.get(DOUBLE_BUFFER, 0)))
                self._walk(stmt.body, phase, 1, 1, True)
            else:
                self._walk(stmt.body, phase, trip * extent, seq_trip, in_tile, steps)
        elif isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            self._alloc(block, in_tile)
            if has_child_block(block):
                self._walk(block.body, phase, trip, seq_trip, in_tile, steps)
            else:
                self._leaf(block, phase, trip, seq_trip, steps)
        elif isinstance(stmt, (tirx.IfThenElse,)):
            self._walk(stmt.then_case, phase, trip, seq_trip, in_tile, steps)
        elif hasattr(stmt, "body"):
            self._walk(stmt.body, phase, trip, seq_trip, in_tile, steps)

    def _leaf(self, block, phase: _Phase, trip: int, seq_trip: int, steps: int) -> None:
        body = block.body
        reads = [r.source for r in block.reads]
        writes = [w.source for w in block.writes]
        self.touched.append([buf for buf in (*reads, *writes)
                             if buf in self.lb_buffers or buf in self.tile_gb_buffers
                             or buf in self.gb_buffers])
        for buf in writes:
            self._phase_writes.add(buf)
            if buf in self.params:
                self.written_params.add(buf)
        matrix = _matrix_call(body)
        if matrix is not None:
            m, n, k = matrix
            phase.add({"kind": "compute", "unit_kind": "matrix", "ops": trip * m * n * k,
                       "calls": trip}, reads, writes, steps)
            return
        # After LowerInitBlock a reduction body is [if (first) init; update]: model the update.
        last = _seq(body)[-1]
        store = last if isinstance(last, tirx.BufferStore) else None
        if store is None:
            phase.add({"kind": "compute", "unit_kind": "vector", "ops": trip}, reads, writes, steps)
            return
        dst = level_of(store.buffer.scope())
        value = store.value
        if isinstance(value, tvm.ir.TensorLoad) and level_of(value.source.scope()) != dst:
            src = level_of(value.source.scope())
            nbytes = trip * elem_bytes(store.buffer)
            event = {"kind": "dma", "src": src, "dst": dst, "bytes": nbytes, "transfers": seq_trip,
                     "tensor": (value.source if LEVELS.index(src) < LEVELS.index(dst)
                                else store.buffer).name}
            if MOVEMENT in (block.annotations or {}):
                event["movement"] = str(block.annotations[MOVEMENT])
            phase.add(event, reads, writes, steps)
            self.dma_destinations.add(store.buffer)
            return
        ops, mac = _count_ops(store)
        event = {"kind": "compute", "unit_kind": "vmac" if mac else "vector", "ops": trip * max(ops, 1)}
        direct: dict[str, int] = defaultdict(int)
        for buf in [store.buffer, *element_loads(value)]:
            level = level_of(buf.scope())
            if level != "lb":
                direct[level] += trip * elem_bytes(buf)
        if direct:
            event["direct"] = dict(direct)
        phase.add(event, reads, writes, steps)


def _loads(stmt) -> bool:
    """Whether ``stmt`` is a loop nest around a DMA towards a faster level (no sequence between)."""
    while True:
        if isinstance(stmt, s_tir.SBlockRealize):
            if not has_child_block(stmt.block):
                store = _seq(stmt.block.body)[-1]
                return isinstance(store, tirx.BufferStore) and isinstance(
                    store.value, tvm.ir.TensorLoad) and LEVELS.index(level_of(
                        store.value.source.scope())) < LEVELS.index(level_of(store.buffer.scope()))
            stmt = stmt.block.body
        elif isinstance(stmt, tirx.SeqStmt):
            return False
        elif isinstance(stmt, tirx.IfThenElse):
            stmt = stmt.then_case
        elif hasattr(stmt, "body"):
            stmt = stmt.body
        else:
            return False


def read_in_place(block, region) -> bool:
    """Whether ``block`` must read ``region`` where it lies rather than from a staged copy of the
    slice it needs: the region is indexed by loaded values (:func:`indexed_by_data`), or the block
    loads the buffer at several different indices not all inside the region (a concat of a tensor
    with itself, whose ``T.reads`` keeps one region after ``FuseTIR``): a copy placed per tile
    would hold that one slice alone. Loads at several indices that the region covers (DLRM's
    index columns, read by one concatenation) are staged."""
    if indexed_by_data(region):
        return True
    loads: list = []
    tvm_ffi_walk(block.body, tvm.ir.TensorLoad, loads)
    loads = [load for load in loads if load.source.same_as(region.source)]
    if len({tuple(str(i) for i in load.indices) for load in loads}) < 2:
        return False
    analyzer = tvm.sym.Analyzer()
    return not all(analyzer.can_prove(index >= rng.min) and analyzer.can_prove(index < rng.min + rng.extent)
                   for load in loads for index, rng in zip(load.indices, region.region))


def _seq(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def tvm_ffi_walk(node, kind, out: list) -> None:
    import tvm_ffi

    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")


def _matrix_call(body):
    calls = []
    tvm_ffi_walk(body, tvm.ir.Call, calls)
    for call in calls:
        if getattr(call.op, "name", "") == "tirx.call_extern" and \
                str(call.args[0].value).startswith(MATRIX_CALL_PREFIX):
            m, n, k = (int(a) for a in call.args[-3:])
            return m, n, k
    return None


def _count_ops(store) -> tuple[int, bool]:
    """Operations in one store (arithmetic nodes and intrinsic calls, each counted once) and
    whether it is a multiply-accumulate update ``x = x + a * b`` (then one operation)."""
    value = store.value
    ops = _value_ops(value)
    mac = (isinstance(value, tirx.Add) and any(
        isinstance(side, tirx.Mul) for side in (value.a, value.b)) and any(
        isinstance(side, tvm.ir.TensorLoad) and side.source.same_as(store.buffer)
        for side in (value.a, value.b)))
    return (1 if mac else ops), mac


def _value_ops(expr) -> int:
    """Operations on values; index arithmetic inside loads is address generation, not counted,
    and so is a select on indices alone (:func:`index_select`): it picks the source of a move."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return 0
    branches = index_select(expr)
    if branches is not None:
        return sum(_value_ops(b) for b in branches)
    own = 1 if isinstance(expr, (*_ARITH, tvm.ir.Call)) else 0
    if isinstance(expr, tvm.ir.Call):
        children = list(expr.args)
    elif isinstance(expr, tirx.Select):
        children = [expr.condition, expr.true_value, expr.false_value]
    elif isinstance(expr, tirx.Not):
        children = [expr.a]
    elif hasattr(expr, "a") and hasattr(expr, "b"):
        children = [expr.a, expr.b]
    elif isinstance(expr, tirx.Cast):
        children = [expr.value]
    else:
        children = []
    return own + sum(_value_ops(c) for c in children if isinstance(c, tvm.ir.Expr))


def index_select(expr) -> tuple | None:
    """The two branches of a select (``Select`` or ``if_then_else``) whose condition reads no
    buffer, else None. Such a select chooses where an element comes from by its position, as
    concatenation and padding do (GraphTurbo section 3.5 counts concat as data movement): the
    element is moved once, the branch resolved when the copy loops are split by position
    (TVM's ``LoopPartition``), so the condition costs no operation per element."""
    if isinstance(expr, tirx.Select):
        condition, branches = expr.condition, (expr.true_value, expr.false_value)
    elif isinstance(expr, tvm.ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
        condition, branches = expr.args[0], (expr.args[1], expr.args[2])
    else:
        return None
    return None if loaded_buffers(condition) else branches


def element_loads(expr) -> list:
    """The buffers one evaluation of ``expr`` loads from, once per load: a select by position
    (:func:`index_select`, a concatenation's) loads from one of its branches, counted as the
    branch loading the most bytes."""
    branches = index_select(expr)
    if branches is None:
        return loaded_buffers(expr)
    return max((element_loads(b) for b in branches), key=lambda bufs: sum(elem_bytes(b) for b in bufs))


def loaded_buffers(expr) -> list:
    """The buffers ``expr`` loads from, once per load."""
    loads = []
    tvm_ffi_walk(expr, tvm.ir.TensorLoad, loads)
    return [load.source for load in loads]


def _bytes(buf) -> int:
    return math.prod(_int(d) for d in buf.shape) * elem_bytes(buf)


def _int(value) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, tirx.IntImm):
        return int(value.value)
    raise ValueError(f"symbolic extent {value}: the DSA model needs static shapes")

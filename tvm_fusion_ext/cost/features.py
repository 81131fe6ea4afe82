"""Static features of a scheduled PrimFunc: what the cost model of :mod:`.model` reads.

The default CPU schedule (:mod:`tvm_fusion_ext.tir_passes.default_schedule`) leaves one loop nest
per child statement of the root block. For each nest this module reads, from the scheduled TIR
alone (nothing is compiled or run):

* the arithmetic of every leaf block, weighted by how many times its loops run it (``ops``; an
  operation of the stored value counts 1, a call such as ``exp`` counts :data:`CALL_OPS`, loads
  and index arithmetic count nothing), split by the way the schedule left the block:

  - ``tiled``: a reduction inside a vectorised loop whose accumulators stay in registers over
    several reduction steps, i.e. a contraction given a register tile (vector accumulators,
    GraphTurbo section 4.1 / ``register_tile``): a reduction loop iterates below the innermost
    serial spatial loop (:func:`_carries_accumulators`); or, in a kernel written as loops rather
    than blocks (``cpu_attention``), a vectorised accumulation into a ``local`` buffer
    (``acc[...] = acc[...] + ...``);
  - ``reduce``: a reduction with no vectorised loop: a scalar accumulation chain (a contraction
    the schedule could not tile);
  - ``vector``: any other block inside a vectorised loop, a vectorised reduction whose every
    step loads and stores its accumulators included (its reduction loops all enclose a spatial
    loop: a contraction whose reduction could not be blocked, e.g. with a producer computed at
    each reduction step);
  - ``scalar``: the rest;

  and whether a parallel loop encloses it (then its work is spread over the cores). Given the
  target's :class:`~tvm_fusion_ext.hardware.spec.HardwareSpec`, a ``tiled`` block with fewer
  independent accumulators than its FMA pipeline needs to hide their latency (``fma_units *
  fma_latency`` vectors, :func:`accumulator_vectors`) counts its operations ``needed /
  accumulators`` times: each FMA of the chain waits on the previous one into the same register
  (one 14-lane row of accumulators under a channel loop runs at a quarter of the peak on AVX2);
  and a vectorised block whose innermost vectorised loop fills only part of the target's
  vectors counts its operations as whole vectors (:func:`partial_vector_factor`: a 4-wide
  channel loop on AVX-512 does a quarter of the work per instruction);
* the bytes of the buffers the nest touches that live in memory (function parameters and
  ``global`` buffers of the root block; intermediates the schedule moved into a tile are
  ``local`` and cost nothing), each buffer counted once per nest.

Blocks marked for weight pre-packing (``meta_schedule.layout_rewrite_preproc``) are left out:
the CPU pipeline folds them at compile time (``SplitLayoutRewritePreproc`` + ``FoldConstant``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..hardware.spec import HardwareSpec
from ..tir_passes.analysis import REDUCE, uses_any
from ..tir_passes.loop_fusion import LAYOUT_REWRITE_PREPROC

# Arithmetic a call (exp, erf, tanh, sigmoid...) stands for: the polynomial VectorExp / VectorErf
# evaluate per lane is about this many multiply-adds.
CALL_OPS = 16
CLASSES = ("tiled", "reduce", "vector", "scalar")
_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.FloorMod, tirx.Max, tirx.Min)


@dataclass
class NestFeatures:
    """One loop nest: ``ops[(class, parallel)]`` weighted operations and ``bytes`` in memory."""

    ops: dict[tuple[str, bool], float] = field(default_factory=dict)
    bytes: int = 0

    def add(self, kind: str, parallel: bool, ops: float) -> None:
        self.ops[(kind, parallel)] = self.ops.get((kind, parallel), 0.0) + ops


def kernel_features(func: tirx.PrimFunc, spec: HardwareSpec | None = None) -> list[NestFeatures]:
    """The :class:`NestFeatures` of every loop nest of ``func`` (scheduled or not); with ``spec``,
    latency-bound register tiles count their FMA chains' waiting (module docstring)."""
    root = func.body.block if isinstance(func.body, s_tir.SBlockRealize) else None
    memory = set(func.params)
    body = func.body
    if root is not None:
        memory |= {b for b in root.alloc_buffers if b.scope() == "global"}
        body = root.body
    nests = body.seq if isinstance(body, tirx.SeqStmt) else [body]
    out = []
    for stmt in nests:
        for phase, trips, parallel, loops in _phases(stmt):
            nest = NestFeatures()
            touched: dict[int, int] = {}
            _walk(phase, trips, False, parallel, nest, touched, memory, loops, spec)
            nest.bytes = sum(touched.values())
            if nest.ops or nest.bytes:
                out.append(nest)
    return out


def _phases(stmt) -> list[tuple]:
    """``(statement, trips, parallel, loops)`` of each phase of a loop nest: the statements in
    sequence under its outer loops when two of them hold reductions (a chain kernel's block loop
    computes the producer's rows, then the anchor's tile: GraphTurbo section 4.1 loop fusion along
    a chain), or the nest itself. Every core runs the phases of its block one after the other, so
    a memory-bound phase (a depthwise conv streaming its input) and a compute-bound one (the 1x1
    conv after it) do not overlap: each is its own ``max(compute, memory)`` term."""
    trips, parallel, loops = 1.0, False, ()
    while isinstance(stmt, tirx.For) and not isinstance(stmt.body, (s_tir.SBlockRealize, tirx.BufferStore)):
        if stmt.kind == tirx.ForKind.VECTORIZED:
            break
        trips *= stmt.extent.value if isinstance(stmt.extent, tvm.tirx.IntImm) else 1
        parallel = parallel or stmt.kind == tirx.ForKind.PARALLEL
        loops = (*loops, stmt)
        stmt = stmt.body
    if isinstance(stmt, tirx.SeqStmt) and sum(map(_reduces, stmt.seq)) >= 2:
        return [(child, trips, parallel, loops) for child in stmt.seq]
    return [(stmt, trips, parallel, loops)]


def _reduces(stmt) -> bool:
    """Whether a block under ``stmt`` is a reduction."""
    found = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, lambda block: found.append(
        any(iv.iter_type == REDUCE for iv in block.iter_vars)))])
    return any(found)


def _walk(stmt, trips: float, vectorized: bool, parallel: bool, nest: NestFeatures,
          touched: dict, memory: set, loops: tuple, spec: HardwareSpec | None) -> None:
    """Add ``stmt``'s work to ``nest``: it runs ``trips`` times, inside the ``loops`` (outermost
    first), some vectorised or parallel."""
    if isinstance(stmt, tirx.For):
        kind = stmt.kind
        extent = stmt.extent.value if isinstance(stmt.extent, tvm.tirx.IntImm) else 1
        _walk(stmt.body, trips * extent, vectorized or kind == tirx.ForKind.VECTORIZED,
              parallel or kind == tirx.ForKind.PARALLEL, nest, touched, memory, (*loops, stmt), spec)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _walk(s, trips, vectorized, parallel, nest, touched, memory, loops, spec)
    elif isinstance(stmt, s_tir.SBlockRealize):
        _block(stmt, trips, vectorized, parallel, nest, touched, memory, loops, spec)
    elif isinstance(stmt, tirx.IfThenElse):
        _walk(stmt.then_case, trips, vectorized, parallel, nest, touched, memory, loops, spec)
        if stmt.else_case is not None:
            _walk(stmt.else_case, trips, vectorized, parallel, nest, touched, memory, loops, spec)
    elif isinstance(stmt, (tirx.LetStmt, tirx.AttrStmt, tirx.DeclBuffer)):
        _walk(stmt.body, trips, vectorized, parallel, nest, touched, memory, loops, spec)
    elif isinstance(stmt, tirx.BufferStore):  # a store outside any block (non-s_tir TIR)
        kind = ("tiled" if _accumulates(stmt) else "vector") if vectorized else "scalar"
        nest.add(kind, parallel, trips * max(value_ops(stmt.value), 1))
        _touch(stmt.buffer, touched, memory)


def _block(realize: s_tir.SBlockRealize, trips: float, vectorized: bool, parallel: bool,
           nest: NestFeatures, touched: dict, memory: set, loops: tuple,
           spec: HardwareSpec | None) -> None:
    block = realize.block
    if block.annotations and LAYOUT_REWRITE_PREPROC in block.annotations:
        return
    for region in [*block.reads, *block.writes]:
        _touch(region.source, touched, memory)
    if isinstance(block.body, tirx.BufferStore):
        if not any(iv.iter_type == REDUCE for iv in block.iter_vars):
            kind = "vector" if vectorized else "scalar"
        elif not vectorized:
            kind = "reduce"
        else:
            kind = "tiled" if _carries_accumulators(realize, loops) else "vector"
        ops = trips * max(value_ops(block.body.value), 1)
        if vectorized and spec is not None:
            lanes = spec.vector_lanes(str(block.body.buffer.dtype))
            ops *= partial_vector_factor(loops, lanes)
            if kind == "tiled":
                needed = spec.fma_units * spec.fma_latency
                ops *= max(1.0, needed / accumulator_vectors(realize, loops, lanes))
                if streams_every_accumulator(realize, loops):
                    ops *= spec.fma_units
        nest.add(kind, parallel, ops)
        return
    _walk(block.body, trips, vectorized, parallel, nest, touched, memory, loops, spec)


def _carries_accumulators(realize: s_tir.SBlockRealize, loops: tuple) -> bool:
    """Whether a reduction loop of more than one iteration runs below the innermost serial
    spatial loop (more than one iteration, neither unrolled nor vectorised) enclosing the
    reduction ``realize``: the micro-kernel's accumulators then stay in registers over those
    reduction steps. Otherwise each reduction step walks the whole tile of accumulators, loading
    and storing each one: the ``1 x 7 x 7`` loops of an NCHW conv tile between a channel loop
    outside and the vector FMAs inside."""
    reduce_values = _reduce_values(realize)
    inner_reduction = False
    for loop in reversed(loops):
        extent = loop.extent.value if isinstance(loop.extent, tvm.tirx.IntImm) else 2
        if extent <= 1:
            continue
        if any(uses_any(value, [loop.loop_var]) for value in reduce_values):
            inner_reduction = True
        elif loop.kind not in (tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED):
            return inner_reduction
    return inner_reduction


def partial_vector_factor(loops: tuple, lanes: int) -> float:
    """How many times its element count a block's innermost vectorised loop costs in vector
    operations of ``lanes``: ``ceil(extent / lanes) * lanes / extent`` (a 4-wide loop on a
    16-lane machine fills a quarter of each vector, so it runs 4 times the operations a full
    vector would take for its elements); 1 for a loop of whole vectors."""
    vector = next((loop for loop in reversed(loops) if loop.kind == tirx.ForKind.VECTORIZED), None)
    if vector is None or not isinstance(vector.extent, tvm.tirx.IntImm) or vector.extent.value <= 0:
        return 1.0
    extent = vector.extent.value
    return -(-extent // lanes) * lanes / extent


def accumulator_vectors(realize: s_tir.SBlockRealize, loops: tuple, lanes: int) -> int:
    """Independent vector accumulators of the register tile of the reduction ``realize``: the
    spatial loops between the innermost reduction loop (more than one iteration) and the block,
    a vectorised one counted in vectors of ``lanes`` (a partial vector takes a register)."""
    reduce_values = _reduce_values(realize)
    count = 1
    for loop in reversed(loops):
        extent = loop.extent.value if isinstance(loop.extent, tvm.tirx.IntImm) else 1
        if extent <= 1:
            continue
        if any(uses_any(value, [loop.loop_var]) for value in reduce_values):
            break
        count *= -(-extent // lanes) if loop.kind == tirx.ForKind.VECTORIZED else extent
    return count


def streams_every_accumulator(realize: s_tir.SBlockRealize, loops: tuple) -> bool:
    """Whether an operand of the reduction ``realize`` is read at another address for every
    accumulator of its register tile (it varies along every loop of the tile: a depthwise conv's
    input, where nothing is broadcast): each FMA then waits on a load of its own, and the tile
    issues one FMA per cycle, not ``fma_units``."""
    reduce_values = _reduce_values(realize)
    tile_vars = []
    for loop in reversed(loops):
        extent = loop.extent.value if isinstance(loop.extent, tvm.tirx.IntImm) else 1
        if any(uses_any(value, [loop.loop_var]) for value in reduce_values):
            break
        if extent > 1:
            tile_vars.append(loop.loop_var)
    if len(tile_vars) < 2:
        return False
    block = realize.block
    bound_by = [[iv.var for iv, value in zip(block.iter_vars, realize.iter_values) if uses_any(value, [var])]
                for var in tile_vars]  # the block variables each tile loop drives
    out = block.writes[0].source
    for read in block.reads:
        if read.source.same_as(out):
            continue
        if all(any(uses_any(rg.min, iter_vars) for rg in read.region) for iter_vars in bound_by):
            return True
    return False


def _reduce_values(realize: s_tir.SBlockRealize) -> list:
    return [value for iv, value in zip(realize.block.iter_vars, realize.iter_values)
            if iv.iter_type == REDUCE]


def _accumulates(store: tirx.BufferStore) -> bool:
    """``acc[i] = acc[i] + x`` into a ``local`` buffer: a register tile's accumulator."""
    value = store.value
    return (store.buffer.scope() == "local" and isinstance(value, tirx.Add)
            and isinstance(value.a, tvm.ir.TensorLoad) and value.a.source.same_as(store.buffer))


def _touch(buffer, touched: dict, memory: set) -> None:
    if buffer in memory:
        touched[buffer] = _buffer_bytes(buffer)


def _buffer_bytes(buffer) -> int:
    count = 1
    for dim in buffer.shape:
        count *= int(dim) if isinstance(dim, (int, tvm.tirx.IntImm)) else 1
    return count * max(tvm.runtime.DataType(str(buffer.dtype)).bits // 8, 1)


def value_ops(expr) -> float:
    """Arithmetic operations of a stored value (loads and their indices count nothing)."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return 0.0
    if isinstance(expr, _BINARY):
        return 1.0 + value_ops(expr.a) + value_ops(expr.b)
    if isinstance(expr, tirx.Select):
        return 1.0 + value_ops(expr.true_value) + value_ops(expr.false_value)
    if isinstance(expr, tirx.Cast):
        return value_ops(expr.value)
    if isinstance(expr, tvm.ir.Call):
        name = str(getattr(expr.op, "name", ""))
        inner = sum(value_ops(a) for a in expr.args)
        return inner + (1.0 if name.endswith("if_then_else") else CALL_OPS)
    return 0.0

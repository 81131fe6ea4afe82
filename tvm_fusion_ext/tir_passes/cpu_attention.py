"""Attention as one CPU loop nest: the scores of a block of queries stay in cache, and no buffer of
batch x queries x keys scores exists.

:class:`CPUAttention` is a dlight-style schedule rule (``ScheduleRule.apply(func, target,
tunable)``, ``python/tvm/s_tir/dlight/base/schedule_rule.py``) for a PrimFunc that
:func:`~.attention_pattern.match_attention` recognises, on a CPU target. As for
:class:`~.flash_attention.FlashAttention`, no schedule primitive turns the fused function's
full-size score, max, sum and value blocks into one tiled nest, so the rule returns a schedule of
a new PrimFunc with the same parameters and attributes, written from the matched pattern (its
loads, index maps and score scale ``f``). It is the stitched form of APOLLO's memory stitching
(section 4.2: the row a reduction and its consumers share is kept on chip) and the tiling of
FlashAttention (Dao et al. 2022, Algorithm 1: queries in blocks, keys and values streamed
through fast memory per block), in the two-pass variant a CPU prefers (PyTorch's CPU flash
kernel also blocks queries and keys and runs gemm, softmax, gemm per block): the row block's
whole score tile fits the L2 cache, so the softmax needs no running rescale::

    parallel over (batch, group of query blocks):
        Kt[c, j] = K(b, j, c);  Vp[j, d] = V(b, j, d)        keys packed once per task, zero padded
        for each block of ROWS queries i:
            S[i, j] = f(sum_c Q(b, i, c) * Kt[c, j])          register tiles of ROW_UNROLL x WIDTH
            m[i] = max_j S[i, j];  P[i, j] = exp(S[i, j] - m[i]);  l[i] = sum_j P[i, j]
            O[i, d] = sum_j P[i, j] * Vp[j, d]                register tiles of ROW_UNROLL x WIDTH
            Out[g(b, i, d)] = O[i, d] / l[i]

``WIDTH`` is :data:`VECTORS` registers of ``spec.vector_lanes("float32")`` lanes: the key axis
of ``Kt`` and the head axis of ``Vp`` are contiguous and vectorised, and ``ROW_UNROLL`` query rows
are unrolled as independent accumulators (enough to cover the FMA latency, few enough to stay in
the spec's vector registers). Queries and keys that do not fill a block are padded: padded keys
get the lowest float32 score (``exp`` gives 0) and zero values, padded query rows are computed
and not stored. The ``exp`` calls are float32 ``tirx.exp``, which
:class:`~.vector_exp.VectorExp` turns into a vectorisable polynomial after scheduling.
"""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, tirx
from tvm.script import tirx as T

from ..hardware import CPUSpec, HardwareSpec, spec_for_target
from .attention_pattern import FLOAT32_LOWEST, AttentionPattern, match_attention
from .plain_schedule import CHUNKS_PER_CORE
from .rule_base import SpecScheduleRule

ROWS = 16  # queries per block: the score tile is ROWS x keys
VECTORS = 2  # vector registers per accumulator row of a register tile
KEY_TILE = 128  # keys of the packed V the P·V register tiles stream before moving on


class CPUAttention(SpecScheduleRule):
    """Schedules an attention PrimFunc as one cache-blocked CPU loop nest (module docstring);
    declines non-CPU targets (``reason`` says why) and passes over anything that is not exactly
    attention (:meth:`~.rule_base.SpecScheduleRule.pass_over`: no remark, as every kernel but
    attention is declined)."""

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        self.reason, self.notes, self.applicable = None, [], True
        spec = self.spec or spec_for_target(target)
        if not isinstance(spec, CPUSpec) or "dsa" in target.keys:
            return self.decline("not a CPU target")
        pattern = match_attention(func) if isinstance(func, tirx.PrimFunc) else None
        if pattern is None:
            return self.pass_over()
        return s_tir.Schedule(cpu_attention_func(pattern, spec))


def cpu_attention_func(pattern: AttentionPattern, spec: HardwareSpec) -> tirx.PrimFunc:
    """The blocked attention loop nest computing ``pattern.func`` on a CPU described by ``spec``,
    with ``pattern.func``'s parameters and attributes (module docstring)."""
    batch_extents = [extent for _, extent in pattern.batch]
    batches = math.prod(batch_extents)
    (_, queries), (_, keys) = pattern.query, pattern.key
    (_, contract), (_, head) = pattern.contract, pattern.head
    lanes = spec.vector_lanes("float32")
    width = VECTORS * lanes
    # Rows of a register tile: enough accumulators to keep the FMA units busy, with registers left
    # for the VECTORS loaded operands and the broadcast one.
    unroll = max(1, min(spec.fma_units * spec.fma_latency, spec.vector_registers - VECTORS - 1) // VECTORS)
    rows = -(-ROWS // unroll) * unroll
    keys_p, head_p = -(-keys // width) * width, -(-head // width) * width
    blocks = -(-queries // rows)
    # Query blocks per task: as few as give every core CHUNKS_PER_CORE tasks (the keys are
    # packed once per task).
    per_task = max(1, blocks // max(1, -(-CHUNKS_PER_CORE * spec.num_cores // batches)))
    groups = -(-blocks // per_task)
    key_tile = min(KEY_TILE, keys_p)
    key_tiles = -(-keys_p // key_tile)
    lowest = T.float32(FLOAT32_LOWEST)
    zero = T.float32(0)

    def whole_vectors(extent):
        """A loop over a contiguous axis: vectorised where it is whole vectors."""
        return T.vectorized(extent) if extent % lanes == 0 else T.serial(extent)

    def row_of(task, block, r):
        return (task % groups * per_task + block) * rows + r

    # The body reads and writes ``pattern.func``'s parameters, which become this function's below.
    @T.prim_func(private=True, s_tir=True, check_well_formed=False)
    def kernel():
        for task in T.parallel(batches * groups):
            with T.sblock("cpu_attention"):
                k_pack = T.sblock_alloc_buffer((keys_p // width, contract, width))
                v_pack = T.sblock_alloc_buffer((head_p // width, keys_p, width))
                q_tile = T.sblock_alloc_buffer((rows, contract))
                scores = T.sblock_alloc_buffer((rows, keys_p))
                acc = T.sblock_alloc_buffer((rows, head_p))
                lane_max = T.sblock_alloc_buffer((rows, lanes))
                row_max = T.sblock_alloc_buffer((rows,))
                row_sum = T.sblock_alloc_buffer((rows,))
                tile = T.sblock_alloc_buffer((unroll, width), scope="local")
                lane = T.sblock_alloc_buffer((lanes,), scope="local")
                # Kt and Vp: whole vectors where the keys (head) fill them, zero padded at the edge
                for jv in range(keys // width):
                    for c in range(contract):
                        for u in T.vectorized(width):
                            k_pack[jv, c, u] = pattern.key_at(task // groups, jv * width + u, c)
                for j in range(keys // width * width, keys_p):
                    for c in range(contract):
                        k_pack[j // width, c, j % width] = T.if_then_else(j < keys, pattern.key_at(task // groups, j, c), zero)
                for dv in range(head // width):
                    for j in range(keys):
                        for u in T.vectorized(width):
                            v_pack[dv, j, u] = pattern.value_at(task // groups, j, dv * width + u)
                for d in range(head // width * width, head_p):
                    for j in range(keys):
                        v_pack[d // width, j, d % width] = T.if_then_else(d < head, pattern.value_at(task // groups, j, d), zero)
                for dv in range(head_p // width):
                    for j in range(keys, keys_p):
                        for u in T.vectorized(width):
                            v_pack[dv, j, u] = zero
                for block in range(per_task):
                    if row_of(task, block, 0) < queries:
                        for r in range(rows):
                            if row_of(task, block, r) < queries:
                                for c in whole_vectors(contract):
                                    q_tile[r, c] = pattern.query_at(task // groups, row_of(task, block, r), c)
                            else:
                                for c in whole_vectors(contract):
                                    q_tile[r, c] = zero
                            for u in T.vectorized(lanes):
                                lane_max[r, u] = lowest
                        # S = f(Q Kt), unroll x width register tiles (keys vectorised), and each
                        # row's running maximum per lane
                        for jv in range(keys_p // width):
                            for rg in range(rows // unroll):
                                for r in T.unroll(unroll):
                                    for v in T.unroll(VECTORS):
                                        for u in T.vectorized(lanes):
                                            tile[r, v * lanes + u] = zero
                                for c in range(contract):
                                    for r in T.unroll(unroll):
                                        for v in T.unroll(VECTORS):
                                            for u in T.vectorized(lanes):
                                                tile[r, v * lanes + u] = tile[r, v * lanes + u] + q_tile[
                                                    rg * unroll + r, c] * k_pack[jv, c, v * lanes + u]
                                for r in T.unroll(unroll):
                                    for v in T.unroll(VECTORS):
                                        for u in T.vectorized(lanes):
                                            scores[rg * unroll + r, jv * width + v * lanes + u] = T.Select(
                                                jv * width + v * lanes + u < keys,
                                                pattern.scaled(tile[r, v * lanes + u]), lowest)
                                            lane_max[rg * unroll + r, u] = T.max(
                                                lane_max[rg * unroll + r, u],
                                                scores[rg * unroll + r, jv * width + v * lanes + u])
                        # P = exp(S - max) and its row sums, lanes-wide partial sums
                        for r in range(rows):
                            row_max[r] = lowest
                            for u in range(lanes):
                                row_max[r] = T.max(row_max[r], lane_max[r, u])
                            for u in T.vectorized(lanes):
                                lane[u] = zero
                            for j in range(keys_p // lanes):
                                for u in T.vectorized(lanes):
                                    scores[r, j * lanes + u] = T.exp(scores[r, j * lanes + u] - row_max[r])
                                    lane[u] = lane[u] + scores[r, j * lanes + u]
                            row_sum[r] = zero
                            for u in range(lanes):
                                row_sum[r] = row_sum[r] + lane[u]
                            for d in T.vectorized(head_p):
                                acc[r, d] = zero
                        # O = P Vp, unroll x width register tiles (head vectorised), KEY_TILE keys
                        # of Vp at a time
                        for t in range(key_tiles):
                            for dv in range(head_p // width):
                                for rg in range(rows // unroll):
                                    for r in T.unroll(unroll):
                                        for v in T.unroll(VECTORS):
                                            for u in T.vectorized(lanes):
                                                tile[r, v * lanes + u] = acc[rg * unroll + r, dv * width + v * lanes + u]
                                    for j in range(T.min(key_tile, keys_p - t * key_tile)):
                                        for r in T.unroll(unroll):
                                            for v in T.unroll(VECTORS):
                                                for u in T.vectorized(lanes):
                                                    tile[r, v * lanes + u] = tile[r, v * lanes + u] + scores[
                                                        rg * unroll + r, t * key_tile + j] * v_pack[
                                                        dv, t * key_tile + j, v * lanes + u]
                                    for r in T.unroll(unroll):
                                        for v in T.unroll(VECTORS):
                                            for u in T.vectorized(lanes):
                                                acc[rg * unroll + r, dv * width + v * lanes + u] = tile[r, v * lanes + u]
                        for r in range(rows):
                            if row_of(task, block, r) < queries:
                                row_sum[r] = T.float32(1) / row_sum[r]
                                for d in whole_vectors(head):
                                    pattern.store_output(task // groups, row_of(task, block, r), d, acc[r, d] * row_sum[r])

    func = pattern.func
    return tirx.PrimFunc(func.params, kernel.body, attrs=func.attrs)

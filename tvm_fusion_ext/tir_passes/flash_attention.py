"""Attention as one GPU kernel in the FlashAttention form (Dao et al., "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness", 2022, Algorithm 1).

:class:`FlashAttention` is a dlight schedule rule (``ScheduleRule.apply(func, target, tunable)``,
``python/tvm/s_tir/dlight/base/schedule_rule.py``) for a PrimFunc that
:func:`~.attention_pattern.match_attention` recognises. No schedule primitive turns the
max / sum / normalise reductions into an online softmax, so the rule returns a schedule of a new
PrimFunc with the same parameters, written from the matched pattern (its loads, index maps and
score scale ``f`` taken from the IR): one thread block per (batch, tile of ``ROWS`` queries), one
thread per query; the keys and values go through shared memory ``KEYS`` at a time, and each thread
keeps its query, running maximum ``m``, running sum ``l`` and output row ``acc`` in registers::

    m_new = max(m, max_j f(q·k_j));  l = l·exp(m - m_new) + sum_j exp(f(q·k_j) - m_new)
    acc = acc·exp(m - m_new) + sum_j exp(f(q·k_j) - m_new)·v_j;  out = acc / l

so no buffer of batch x queries x keys scores exists. :func:`flash_attention_func` with
``threads=False`` gives the same algorithm with serial loops and global scratch buffers, which a
CPU can run (the tests check its numbers against numpy).
"""

from __future__ import annotations

import math

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

from .attention_pattern import FLOAT32_LOWEST, AttentionPattern, match_attention

ROWS = 32  # queries per thread block, one per thread
KEYS = 32  # keys (and values) per shared-memory tile
MAX_HEAD = 256  # longest query / value row a thread keeps in registers
SHARED_BYTES = 48 * 1024  # static __shared__ arrays per block (CUDA's limit without opt-in)


class FlashAttention(dl.ScheduleRule):
    """Schedules an attention PrimFunc as one FlashAttention kernel; declines anything else."""

    def apply(self, func, target, tunable):
        pattern = match_attention(func) if isinstance(func, tirx.PrimFunc) else None
        if pattern is None or "gpu" not in target.keys:
            return None
        (_, contract), (_, head) = pattern.contract, pattern.head
        if max(contract, head) > MAX_HEAD or KEYS * (contract + head) * 4 > SHARED_BYTES:
            return None
        return s_tir.Schedule(flash_attention_func(pattern))


def flash_attention_func(pattern: AttentionPattern, threads: bool = True) -> tirx.PrimFunc:
    """The FlashAttention kernel computing ``pattern.func``, with its parameters and attributes;
    ``threads=False``: serial loops and global scratch buffers instead (runs on a CPU)."""
    batch_extents = [extent for _, extent in pattern.batch]
    batches = math.prod(batch_extents)
    (_, queries), (_, keys) = pattern.query, pattern.key
    (_, contract), (_, head) = pattern.contract, pattern.head
    tile = min(KEYS, keys)
    query_tiles, key_tiles = -(-queries // ROWS), -(-keys // tile)
    shared, local = ("shared", "local") if threads else ("global", "global")

    def bound(extent, thread):
        return T.thread_binding(extent, thread=thread) if threads else T.serial(extent)

    lowest = T.float32(FLOAT32_LOWEST)

    # The body reads and writes ``pattern.func``'s parameters, which become this function's below.
    @T.prim_func(private=True, s_tir=True, check_well_formed=False)
    def kernel():
        for bh in bound(batches, "blockIdx.y"):
            for qt in bound(query_tiles, "blockIdx.x"):
                with T.sblock("flash_attention"):
                    k_tile = T.sblock_alloc_buffer((tile, contract), scope=shared)
                    v_tile = T.sblock_alloc_buffer((tile, head), scope=shared)
                    q_row = T.sblock_alloc_buffer((ROWS, contract), scope=local)
                    acc = T.sblock_alloc_buffer((ROWS, head), scope=local)
                    s = T.sblock_alloc_buffer((ROWS, tile), scope=local)
                    m = T.sblock_alloc_buffer((ROWS,), scope=local)
                    m_prev = T.sblock_alloc_buffer((ROWS,), scope=local)
                    l = T.sblock_alloc_buffer((ROWS,), scope=local)
                    for tx in bound(ROWS, "threadIdx.x"):
                        if qt * ROWS + tx < queries:
                            m[tx] = lowest
                            l[tx] = T.float32(0)
                            for c in range(contract):
                                q_row[tx, c] = pattern.query_at(bh, qt * ROWS + tx, c)
                            for d in range(head):
                                acc[tx, d] = T.float32(0)
                    for t in range(key_tiles):
                        for tx in bound(ROWS, "threadIdx.x"):
                            for e in range(-(-tile * contract // ROWS)):
                                if e * ROWS + tx < tile * contract and \
                                        t * tile + (e * ROWS + tx) // contract < keys:
                                    k_tile[(e * ROWS + tx) // contract, (e * ROWS + tx) % contract] = pattern.key_at(
                                        bh, t * tile + (e * ROWS + tx) // contract, (e * ROWS + tx) % contract)
                            for e in range(-(-tile * head // ROWS)):
                                if e * ROWS + tx < tile * head and t * tile + (e * ROWS + tx) // head < keys:
                                    v_tile[(e * ROWS + tx) // head, (e * ROWS + tx) % head] = pattern.value_at(
                                        bh, t * tile + (e * ROWS + tx) // head, (e * ROWS + tx) % head)
                        for tx in bound(ROWS, "threadIdx.x"):
                            if qt * ROWS + tx < queries:
                                m_prev[tx] = m[tx]
                                for j in range(tile):
                                    s[tx, j] = T.float32(0)
                                    for c in range(contract):
                                        s[tx, j] = s[tx, j] + q_row[tx, c] * k_tile[j, c]
                                    s[tx, j] = T.if_then_else(t * tile + j < keys, pattern.scaled(s[tx, j]), lowest)
                                    m[tx] = T.max(m[tx], s[tx, j])
                                l[tx] = l[tx] * T.exp(m_prev[tx] - m[tx])
                                for d in range(head):
                                    acc[tx, d] = acc[tx, d] * T.exp(m_prev[tx] - m[tx])
                                for j in range(tile):
                                    if t * tile + j < keys:
                                        s[tx, j] = T.exp(s[tx, j] - m[tx])
                                        l[tx] = l[tx] + s[tx, j]
                                        for d in range(head):
                                            acc[tx, d] = acc[tx, d] + s[tx, j] * v_tile[j, d]
                    for tx in bound(ROWS, "threadIdx.x"):
                        if qt * ROWS + tx < queries:
                            for d in range(head):
                                pattern.store_output(bh, qt * ROWS + tx, d, acc[tx, d] / l[tx])

    func = pattern.func
    return tirx.PrimFunc(func.params, kernel.body, attrs=func.attrs)

"""How splitting an op's output splits its inputs, read off its TIR (Algorithm 1 line 10's
``match_dim``, section 3.1's recomputation model).

For an output dimension ``d`` and a factor ``f``, the first of ``f`` pieces of the output is
propagated backwards through the op's blocks: each block's iteration domain is narrowed to what its
write region needs, and each read region is evaluated over that domain (interval arithmetic on the
index expressions). An input whose needed region is what the whole output needs (a contraction
over ``d``, a softmax row...) needs everything; one whose region is smaller along exactly one
dimension ``d'`` is split along ``d'``, with ``halo`` extra indices beyond its share (a
convolution window). Reshapes and
transposes thereby map a split to the dimension that carries it - which the shape alone cannot
tell.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx

from ...tir_passes.analysis import sblocks


def split_maps(func: tirx.PrimFunc, num_inputs: int) -> list[dict[int, tuple[int, int]]]:
    """Per input parameter (the first ``num_inputs``), ``{output dim: (input dim, halo)}`` for
    every output dimension a split of which only needs part of that input (see module docstring).
    The output is the last parameter; an op whose TIR cannot be analysed maps nothing."""
    params = list(func.params)
    out = params[-1]
    shape = _shape(out)
    maps: list[dict[int, tuple[int, int]]] = [{} for _ in range(num_inputs)]
    if not shape:  # unknown, or a 0-d output: nothing to split
        return maps
    blocks = [b for b in sblocks(func) if b.name_hint != "root"]
    whole = _needed(blocks, out, 0, shape[0])  # what the unsplit output reads (strides skip rows)
    if whole is None:
        return maps
    for d, extent in enumerate(shape):
        if extent < 2:
            continue
        f = next(q for q in range(2, extent + 1) if extent % q == 0)
        needed = _needed(blocks, out, d, extent // f)
        if needed is None:
            continue
        for i, param in enumerate(params[:num_inputs]):
            region, base = needed.get(param.name), whole.get(param.name)
            if region is None or base is None:
                continue
            spans = [(hi - lo + 1, bhi - blo + 1) for (lo, hi), (blo, bhi) in zip(region, base)]
            partial = [(k, span, full) for k, (span, full) in enumerate(spans) if span < full]
            if len(partial) == 1:
                k, span, full = partial[0]
                maps[i][d] = (k, max(0, span - math.ceil(full / f)))
    return maps


def _needed(blocks, out, dim: int, length: int) -> dict[str, list[tuple[int, int]]] | None:
    """Needed region (inclusive intervals per dim) of every buffer for the first piece of the
    output along ``dim``; None if a write region is not analysable."""
    analyzer = tvm.sym.Analyzer()
    shape = _shape(out)
    needed = {out.name: [(0, length - 1) if k == dim else (0, e - 1) for k, e in enumerate(shape)]}
    for block in reversed(blocks):
        if not block.writes:
            continue
        write = block.writes[0]
        region = needed.get(write.source.name)
        if region is None:
            continue
        doms = {}
        for iv in block.iter_vars:
            lo = int(iv.dom.min)
            doms[iv.var.name] = (lo, lo + int(iv.dom.extent) - 1)
        for (lo, hi), rng in zip(region, write.region):
            if isinstance(rng.min, tvm.ir.Var) and int(rng.extent) == 1 and rng.min.name in doms:
                vlo, vhi = doms[rng.min.name]
                doms[rng.min.name] = (max(vlo, lo), min(vhi, hi))
        sets = {}
        for iv in block.iter_vars:
            lo, hi = doms[iv.var.name]
            dtype = str(iv.var.ty.dtype)
            sets[iv.var] = tvm.sym.IntervalSet(tirx.const(lo, dtype), tirx.const(hi, dtype))
        for read in block.reads:
            rshape = _shape(read.source)
            if rshape is None:
                return None
            bounds = []
            for rng, ext in zip(read.region, rshape):
                try:
                    span = analyzer.int_set(rng.min, sets)
                    lo, hi = int(span.min_value), int(span.max_value) + int(rng.extent) - 1
                except (TypeError, ValueError, RuntimeError):
                    lo, hi = 0, ext - 1
                bounds.append((max(0, lo), min(ext - 1, hi)))
            old = needed.get(read.source.name)
            needed[read.source.name] = bounds if old is None else [
                (min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(old, bounds)]
    return needed


def _shape(buf) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in buf.ty.shape)
    except (TypeError, AttributeError, ValueError):
        return None

"""Reduction canonical forms (APOLLO section 4.1 after PANAMERA; Listings 3-5).

APOLLO coalesces the loop nest of every reduction into one of three canonical forms so that
reductions can be fused and stitched by matching forms (section 4.2, memory stitching):

* **all-reduce**: every loop is reduced; the nest is flattened into a single reduced loop;
* **x-reduce**: a 2-D nest ``(x, y)`` reduced only along the outer loop ``x`` (e.g. a column sum);
* **y-reduce**: a 2-D nest ``(x, y)`` reduced only along the inner loop ``y`` (Listing 4: the
  spatial loops ``i, k`` become ``x in [0, M*P)``, the reduced loops ``j, l`` become
  ``y in [0, N*Q)``).

The form is read off the block's iterators (unit-extent spatial iterators do not count): the
iterator walking the input's innermost (contiguous) dimension decides between x- and y-reduce.
:func:`canonicalize_reduction` then performs the loop interchange and coalescing of Listing 4 with
``reorder`` and ``fuse``; the tensor subscripts follow through the schedule's block bindings.
"""

from __future__ import annotations

import enum

from tvm import s_tir

from .analysis import REDUCE, SPATIAL, analyze_blocks


class ReductionForm(enum.Enum):
    """APOLLO's three canonical reduction forms (section 4.1)."""

    ALL = "all-reduce"
    X = "x-reduce"
    Y = "y-reduce"


def reduction_form(sch: s_tir.Schedule, block: str) -> ReductionForm | None:
    """The canonical form of reduction block ``block``, or ``None`` if it is not a reduction.

    Read off the block's iterators and index maps only, so a nest that is already flattened
    (Listing 4) has the same form as the original (Listing 3).
    """
    sblock = sch.get(sch.get_sblock(block))
    if not any(iv.iter_type == REDUCE for iv in sblock.iter_vars):
        return None
    significant = [iv for iv in sblock.iter_vars
                   if iv.iter_type == REDUCE or int(iv.dom.extent) > 1]
    if all(iv.iter_type == REDUCE for iv in significant):
        return ReductionForm.ALL
    innermost = _innermost_data_iter(sblock, significant)
    return ReductionForm.Y if innermost.iter_type == REDUCE else ReductionForm.X


def canonicalize_reduction(sch: s_tir.Schedule, block: str):
    """Flatten ``block``'s loop nest into its canonical form (Listing 3 -> Listing 4).

    Returns ``(form, loops)``: for all-reduce the single fused reduced loop (unit spatial loops
    stay outside it), for x-reduce ``[x_reduced, y_spatial]`` and for y-reduce
    ``[x_spatial, y_reduced]``. Returns ``None`` (schedule untouched) if ``block`` is not a
    reduction or its loops do not bind its iterators one to one (e.g. already flattened).
    """
    form = reduction_form(sch, block)
    info = _info(sch, block)
    if form is None or info is None:
        return None
    rv = sch.get_sblock(block)
    loops = sch.get_loops(rv)
    spatial = [loops[p] for p, iv in enumerate(info.loop_iters) if iv.iter_type == SPATIAL]
    reduce = [loops[p] for p, iv in enumerate(info.loop_iters) if iv.iter_type == REDUCE]
    if form is ReductionForm.ALL:
        sch.reorder(*spatial, *reduce)
        return form, [_fuse(sch, reduce)]
    outer, inner = (reduce, spatial) if form is ReductionForm.X else (spatial, reduce)
    sch.reorder(*outer, *inner)
    return form, [_fuse(sch, outer), _fuse(sch, inner)]


def _innermost_data_iter(sblock, significant):
    """The block iterator walking the innermost (contiguous) dimension of the first input that
    uses a significant iterator there; falls back to the last significant iterator."""
    outputs = [w.source for w in sblock.writes]
    for read in sblock.reads:
        if any(read.source.same_as(out) for out in outputs):
            continue
        for rg in reversed(read.region):
            for iv in significant:
                if rg.min.same_as(iv.var):
                    return iv
            if not (hasattr(rg.min, "value") and len(read.region) > 1):
                break
    return significant[-1]


def _fuse(sch: s_tir.Schedule, loops):
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


def _info(sch: s_tir.Schedule, block: str):
    analyzed = analyze_blocks(sch)
    if not analyzed:
        return None
    return next((info for _, info in analyzed if info.name == block), None)

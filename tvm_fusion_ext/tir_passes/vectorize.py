"""Vectorising one loop of a CPU schedule, with a scalar tail when no lane multiple divides it."""

from __future__ import annotations

from tvm import s_tir

from .analysis import vector_factor

# Annotation read by TVM's LoopPartition (src/s_tir/transform/loop_partition.cc): the loop is
# partitioned where its body's ``likely`` condition is constant, so the predicate of a split
# with a tail leaves the full vector iterations and guards only the last one.
PARTITION_HINT = "pragma_loop_partition_hint"


def vectorize_loop(sch: s_tir.Schedule, loop, extent: int, lanes: int):
    """Vectorise ``loop`` (``extent`` iterations); returns the vectorised loop or ``None``.

    The width is :func:`.analysis.vector_factor`'s divisor of ``extent`` when there is one.
    Otherwise (a prime extent) a loop of at least two vectors is split into ``ceil(extent / lanes)`` vectors of
    ``lanes`` whose last one is predicated; the outer loop carries :data:`PARTITION_HINT`, so
    lowering peels that last vector off and the others run unpredicated (ViT's 197 tokens: 12
    vectors of 16 and a scalar tail of 5).
    """
    width = vector_factor(extent, lanes)
    if width is not None:
        if width == extent:
            sch.vectorize(loop)
            return loop
        _, lane = sch.split(loop, [extent // width, width])
        sch.vectorize(lane)
        return lane
    if extent < 2 * lanes:
        return None
    vectors, lane = sch.split(loop, [None, lanes])
    sch.annotate(vectors, PARTITION_HINT, 1)
    sch.vectorize(lane)
    return lane

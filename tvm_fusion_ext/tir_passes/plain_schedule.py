"""Plain per-block CPU schedule: the fallback when anchor loop fusion declines.

Every child block of the root keeps its own loop nest; its leading spatial loops are fused until
they give every core work and parallelised, and its innermost loop is vectorised when it is
spatial, or along its rows when it is a row reduction. Nothing moves between loop nests, so
intermediates stay full size: this is the "no fusion, but not naive" baseline a fused kernel
falls back to.
"""

from __future__ import annotations

from tvm import s_tir

from ..hardware import HardwareSpec
from .analysis import REDUCE, try_primitive
from .rule_base import SpecScheduleRule
from .vectorize import reduces_along_rows, vectorize_loop, vectorize_row_reduction

# Parallel loops are fused until they hold this many chunks of work per core.
CHUNKS_PER_CORE = 4


class PlainSchedule(SpecScheduleRule):
    """Parallel outer spatial loops, vectorised inner spatial loop, per block. Blocks without
    loops are left as they are (nothing to parallelise), the others are still scheduled."""

    skip_loopless = True

    def schedule(self, sch: s_tir.Schedule, analyzed: list, spec: HardwareSpec):
        for rv, info in analyzed:
            loops = sch.get_loops(rv)
            lanes = spec.vector_lanes(str(info.block.writes[0].source.dtype))
            last = len(loops) - 1
            if info.loop_iters[last].iter_type != REDUCE:
                try_primitive(vectorize_loop, sch, loops[-1], info.extents[last], lanes)
                loops = sch.get_loops(rv)
            extents = [*info.extents[:last], *(int(sch.get(loop).extent) for loop in loops[last:])]
            leading = []
            work = 1
            for loop, extent, iv in zip(loops, extents, info.loop_iters):
                if iv.iter_type == REDUCE or work >= CHUNKS_PER_CORE * spec.num_cores:
                    break
                leading.append(loop)
                work *= extent
            if spec.num_cores > 1 and work > 1 and leading:
                outer = sch.fuse(*leading) if len(leading) > 1 else leading[0]
                try_primitive(sch.parallel, outer)
            if info.loop_iters[last].iter_type == REDUCE and reduces_along_rows(info, lanes):
                vectorize_row_reduction(sch, rv, lanes)
        return sch

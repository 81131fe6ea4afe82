"""Predicted run time of one kernel on a DSA target: the cycles the DSA simulator gives the kernel
the DSA backend makes of it.

The DSA backend schedules a kernel of the non-GraphTurbo strategies with the staging schedule
(``target_dsa/schedule.py``, :func:`~tvm_fusion_ext.target_dsa.schedule.schedule_kernels` with no
GraphTurbo plan: inputs staged into LB, the output tiled over the cores, every other block computed
in the output's tile), and the simulator (``target_dsa/simulator.py``) counts the cycles of that
kernel. Nothing is estimated here: the prediction is the simulated kernel, so a group whose tile
recomputes its producers (a concatenation feeding a conv, a conv feeding a pooling or a mean)
costs what it will cost. A kernel the schedule declines runs unstaged, straight from DDR, and is
predicted so. The check makes the kernel without weights marked layout-free (``profitability.py``):
the DSA backend packs none.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..target_dsa.schedule import schedule_kernels
from ..target_dsa.spec import DSASpec
from ..target_dsa.target import spec_of_target
from .model import RememberedPredictions


class DSAKernelModel(RememberedPredictions):
    """Predicted seconds per kernel on a DSA target (module docstring), remembered in memory
    (:class:`~.model.RememberedPredictions`)."""

    def __init__(self, target: tvm.target.Target):
        super().__init__()
        self.target = target
        self.spec: DSASpec = spec_of_target(target)

    def predict(self, func: tirx.PrimFunc) -> float:
        """Seconds of one call of ``func``: its simulated cycles under the staging schedule at the
        spec's clock (generated in this process: one kernel at a time)."""
        ((_, _, cycles),) = schedule_kernels([(func, None)], self.spec, jobs=1)
        return cycles / self.spec.clock_hz

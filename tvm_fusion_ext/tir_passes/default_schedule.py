"""Default CPU schedule applied to every PrimFunc under the ``untuned`` policy.

Interim version: TVM's dlight CPU rules. The loop-fusion issue replaces this with anchor-based
loop fusion (GraphTurbo section 4.1) and keeps the same entry point.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl


def default_schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """Rules tried in order per PrimFunc; already-scheduled functions are left alone."""
    return dl.ApplyDefaultSchedule(dl.cpu.GEMV(), dl.cpu.Reduction())

"""What every tuning driver (:mod:`.cpu`, :mod:`.dsa`) shares: the report, the resume bookkeeping
of a work directory and the run time that marks a failed measurement.

A work directory holds MetaSchedule's JSON database and :data:`DONE_FILE`. A resumed run measures
a kernel again only for the part of its budget that has no record yet, and not at all when a run
with at least that budget finished its search (:class:`Resume`): a small space can run out before
the budget, and the database alone cannot tell that apart from a run cut short.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import tvm
import tvm_ffi

# Per workload key, the largest per-kernel budget a run completed.
DONE_FILE = "tuned.json"
# Run times at or above this are failed runs (MetaSchedule commits those as 1e10 s).
FAILED_SECS = 1e9


@dataclass
class TaskReport:
    """One kernel: records before this run, trials this run measured, best time afterwards;
    the DSA driver adds the untuned schedule's time and the best record's decisions."""

    name: str
    records_before: int
    measured: int
    best_secs: float | None
    default_secs: float | None = None
    best: object | None = None


@dataclass
class TuneReport:
    database: object
    work_dir: str
    trials: int
    tasks: list[TaskReport] = field(default_factory=list)
    # Kernels that are not tuned (already scheduled, or without a DSA design space).
    skipped: list[str] = field(default_factory=list)

    @property
    def measured(self) -> int:
        return sum(task.measured for task in self.tasks)

    def resumed(self) -> list[TaskReport]:
        """Tasks this run found records for."""
        return [task for task in self.tasks if task.records_before > 0]

    def summary(self) -> str:
        """One line: how much was resumed and how much measured."""
        resumed = self.resumed()
        finished = [task for task in resumed if task.measured == 0]
        line = f"{len(self.tasks)} tasks, {self.measured} trials measured this run"
        if resumed:
            line += (f"; resumed {self.work_dir}: {len(resumed)} tasks had records "
                     f"({sum(t.records_before for t in resumed)} in all), {len(finished)} of them "
                     f"already tuned with {self.trials} trials")
        return line

    def table(self) -> str:
        lines = [f"{'task':60s} {'before':>6s} {'new':>4s} {'best us':>10s}"]
        for task in self.tasks:
            best = "-" if task.best_secs is None else f"{task.best_secs * 1e6:.1f}"
            lines.append(f"{task.name[:60]:60s} {task.records_before:6d} {task.measured:4d} {best:>10s}")
        return "\n".join(lines)


def workload_key(mod: tvm.IRModule) -> int:
    """The key of a kernel in a database (``module_equality="structural"``)."""
    return tvm_ffi.structural_hash(mod)


def successful_secs(record) -> float | None:
    """The mean run time of a database record, or ``None`` for a failed or unmeasured one."""
    if not record.run_secs:
        return None
    secs = sum(float(s) for s in record.run_secs) / len(record.run_secs)
    return secs if secs < FAILED_SECS and math.isfinite(secs) else None


class Resume:
    """The budget left per kernel in a work directory: its database's records and :data:`DONE_FILE`."""

    def __init__(self, database, work_dir: str, trials: int):
        self.trials = trials
        self.counts: dict[int, int] = {}
        for record in database.get_all_tuning_records():
            key = workload_key(record.workload.mod)
            self.counts[key] = self.counts.get(key, 0) + 1
        self.path = os.path.join(work_dir, DONE_FILE)
        self.done = _load_done(self.path)

    def records_before(self, workload_mod: tvm.IRModule) -> int:
        """Records the kernel had when this run started."""
        return self.counts.get(workload_key(workload_mod), 0)

    def remaining(self, workload_mod: tvm.IRModule) -> int:
        """Trials still to measure for the kernel: none once a run with this budget finished."""
        if self.done.get(str(workload_key(workload_mod)), 0) >= self.trials:
            return 0
        return max(0, self.trials - self.records_before(workload_mod))

    def mark_done(self, workload_mod: tvm.IRModule) -> None:
        """The kernel's search with this budget finished (even if it stopped short of it)."""
        key = str(workload_key(workload_mod))
        self.done[key] = max(self.trials, self.done.get(key, 0))
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.done, f, indent=1, sort_keys=True)
        os.replace(self.path + ".tmp", self.path)


def _load_done(path: str) -> dict[str, int]:
    """Per workload key, the largest per-kernel budget a run completed (``{}`` when missing)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return {str(k): int(v) for k, v in json.load(f).items()}
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: corrupt tuning progress file ({err}); delete it to re-tune") from None

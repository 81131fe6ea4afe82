"""The JSON database of a tuning work directory, checked line by line before MetaSchedule reads it.

:func:`open_records` is what ``tvm-fusion compile --tuning-records`` opens: a missing, corrupt or
truncated database is a :class:`TuningRecordsWarning` and the compile goes on untuned.
"""

from __future__ import annotations

import json
import os
import warnings

import tvm

from . import dsa
from .ms_builder import only_tensor_intrinsics, tensor_intrin_families

# The two files of MetaSchedule's JSONDatabase in a work directory.
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


class TuningRecordsWarning(UserWarning):
    """A tuning database that cannot be used; the compile goes on without it."""


def open_records(work_dir: str, target) -> object | None:
    """The tuning database ``tvm-fusion tune`` wrote in ``work_dir``, for a compile with
    ``--tuning-records``; ``None`` (and a :class:`TuningRecordsWarning` naming the directory or
    file) when it is missing, corrupt or truncated: the compile then goes on untuned."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    try:
        return open_checked_database(work_dir, target, create=False)
    except ValueError as err:
        warnings.warn(f"{err}; compiling without tuning records", TuningRecordsWarning, stacklevel=2)
        return None


def open_checked_database(work_dir: str, target: tvm.target.Target, create: bool = True):
    """The JSON database in ``work_dir`` after checking every line of its two files.

    ``create`` makes a missing directory / database (tuning); otherwise they are errors.
    Problems are ``ValueError``s naming the file (and line).
    """
    from tvm.s_tir import meta_schedule as ms

    paths = [os.path.join(work_dir, name) for name in (WORKLOAD_FILE, RECORD_FILE)]
    if not create:
        if not os.path.isdir(work_dir):
            raise ValueError(f"{work_dir}: no such tuning directory")
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(f"{path}: missing tuning database file")
    workloads = _check_lines(paths[0], _is_workload_line)
    _check_lines(paths[1], lambda row: _is_record_line(row, workloads))
    os.makedirs(work_dir, exist_ok=True)
    try:
        if "dsa" in target.keys:
            return dsa.open_database(work_dir, target)
        # Records may replay ``tensorize`` with the target's CPU intrinsics: register those.
        with only_tensor_intrinsics(tensor_intrin_families(target)):
            return ms.database.JSONDatabase(path_workload=paths[0], path_tuning_record=paths[1])
    except Exception as err:  # noqa: BLE001 - TVM reports a bad record with many error types
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raise ValueError(f"{work_dir}: unreadable tuning database ({lines[-1] if lines else type(err).__name__})") \
            from None


def _check_lines(path: str, valid) -> int:
    """Number of lines in the JSON-lines file ``path`` (0 when missing); a ``ValueError`` naming
    the file and line for a line that is not JSON or fails ``valid`` (e.g. cut short)."""
    if not os.path.exists(path):
        return 0
    count = 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}: line {number} is not JSON (corrupt or truncated)") from None
            if not valid(row):
                raise ValueError(f"{path}: line {number} is not a MetaSchedule database entry")
            count += 1
    return count


def _is_workload_line(row) -> bool:
    """``[structural hash, base64 IRModule]``."""
    return isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row)


def _is_record_line(row, workloads: int) -> bool:
    """``[workload index, [trace, run secs, target, args info]]`` with an existing workload."""
    return (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int)
            and 0 <= row[0] < workloads and isinstance(row[1], list) and len(row[1]) == 4)

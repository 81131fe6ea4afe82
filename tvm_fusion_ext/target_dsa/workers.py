"""Worker processes for kernel generation.

GraphTurbo's kernel generator (graphturbo-dsa-scheduling.txt section 4) stages and simulates
many candidate schedules per sub-graph, and the partitioner asks for the kernels of many
sub-graphs at once; each is independent of the others, so a batch of them runs on all the
host's cores (:func:`parallel_map`).

How many processes: ``jobs`` where a caller gives it, else ``TVM_FUSION_EXT_JOBS`` when set, else
the CPUs this process may run on (:func:`default_jobs`). The pool starts on first use and lives
as long as the process. Its workers fork from a server process that imported the kernel
generator (multiprocessing's ``forkserver``), never from the caller and its threads.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

JOBS_ENV = "TVM_FUSION_EXT_JOBS"
_PRELOAD = ["tvm_fusion_ext.target_dsa.schedule"]
_LOG = logging.getLogger(__name__)
_WORKER_LOGGER = "tvm_fusion_ext.target_dsa"

_pool: tuple[int, ProcessPoolExecutor] | None = None


def default_jobs() -> int:
    """``TVM_FUSION_EXT_JOBS`` when set (a positive integer), else the CPUs available."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if not value:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{JOBS_ENV}={value!r}: expected a positive number of processes")
    return int(value)


def worker_count(jobs: int | None = None) -> int:
    """The processes :func:`parallel_map` uses: ``jobs`` (None: :func:`default_jobs`), or 1 in a
    daemonic process (a ``multiprocessing.Pool`` worker, which may not start processes)."""
    if multiprocessing.current_process().daemon:
        return 1
    return default_jobs() if jobs is None else jobs


def parallel_map(fn: Callable, items: Sequence, jobs: int | None = None) -> list:
    """``[fn(item) for item in items]``, on :func:`worker_count` worker processes when there are
    two or more of each, else here (``fn`` and the items are pickled: ``fn`` must be a
    module-level function). Items are handed out one at a time as workers free up, so put the
    longest first."""
    jobs = worker_count(jobs)
    if jobs < 2 or len(items) < 2:
        return [fn(item) for item in items]
    try:
        with _caller_script_not_rerun():
            return list(_executor(jobs).map(fn, items))
    except BrokenProcessPool as err:
        _shutdown()
        raise RuntimeError(f"a kernel-generation worker process died; run with {JOBS_ENV}=1 to "
                           "generate kernels in this process and see where") from err


def _executor(jobs: int) -> ProcessPoolExecutor:
    """The pool of ``jobs`` workers, started (again, for another count) when needed."""
    global _pool
    if _pool is None or _pool[0] != jobs:
        _shutdown()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        level = logging.getLogger(_WORKER_LOGGER).getEffectiveLevel()
        _pool = (jobs, ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                                           initargs=(level,)))
        _LOG.info("kernel generation on %d worker processes", jobs)
    return _pool[1]


@contextlib.contextmanager
def _caller_script_not_rerun() -> Iterator[None]:
    """Workers started inside this context do not import the caller's ``__main__``.

    ``multiprocessing`` re-imports the main script (or ``-m`` module) in every worker it starts
    with ``forkserver``, which runs a script without an ``if __name__ == "__main__":`` guard once
    more in each worker. The workers need only this package's modules, so the main module's
    ``__file__`` and ``__spec__`` are hidden while they start (``multiprocessing/spawn.py``,
    ``get_preparation_data``)."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        del main.__spec__
        main.__dict__.update(saved)


def _shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool[1].shutdown(wait=False, cancel_futures=True)
        _pool = None


def _start_worker(level: int) -> None:
    """A worker logs what the caller's DSA loggers would (the DSA's schedules render their errors
    only when debugging: :func:`.tir_helpers.new_schedule`)."""
    logging.getLogger(_WORKER_LOGGER).setLevel(level)
    if level < logging.WARNING:
        logging.basicConfig(level=level)

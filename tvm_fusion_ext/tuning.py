"""MetaSchedule over the kernels one fusion strategy produces (issue 9, items 4 and 5).

:func:`tune` is what ``tvm-fusion tune`` and ``compare --policy tuned`` run:

1. the model is fused by the strategy (:func:`pipelines.fusion_pipeline`: pre-processing,
   fusion, FuseTIR) and the tasks are extracted from *that* module (NOTES section 6.2:
   ``compile_relax`` / ``tune_relax``'s usual path would re-fuse with the built-in FuseOps);
2. each kernel gets up to ``trials`` measured candidates (a per-task budget), one task after
   the other. The first is the ``untuned`` policy's own schedule (:func:`_seed_untuned`), so the
   tuned compile is never slower than the untuned one; the rest come from MetaSchedule's
   post-order-apply space for the target, evolutionary search ranked by the XGBoost cost model,
   compiled by the in-process builder (NOTES sections 0 and 6.1: the default builder's popen
   workers time out on small machines);
3. measurement is local (``LocalRunner``) or distributed (:func:`rpc_runner`: MetaSchedule's
   ``RPCRunner`` asks an RPC tracker for a server registered under a key, uploads the ``.so``
   built here and times it there, one session per candidate, as many in flight as servers);
4. the records go to the JSON database in ``work_dir``; a second run with the same directory
   resumes: a kernel that already has ``trials`` records, or whose search with that budget
   finished (``tuned.json``; a small space can run out before the budget), is not measured again.

A tqdm bar counts the trials. DSA targets delegate to :mod:`.target_dsa.tuning` (its own
design space and simulated builder/runner). The compile side is ``pipelines.pipeline(...,
policy="tuned")`` under the database :func:`open_records` returns.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import tempfile
import warnings
from dataclasses import dataclass, field

import tvm

from .ms_builder import (
    close_logger,
    in_process_builder,
    load_done,
    only_tensor_intrinsics,
    progress_bar,
    quiet_meta_schedule,
    record_counts,
    save_done,
    task_logger,
    tensor_intrin_families,
    trial_progress,
    workload_key,
)
from .pipelines import fusion_pipeline, get_strategy

# The two files of MetaSchedule's JSONDatabase in a work directory.
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
# Per workload key, the largest per-task budget a run completed.
DONE_FILE = "tuned.json"
# Search and measurement settings, in one place. The population is smaller than MetaSchedule's
# default (512): with budgets of a few dozen trials per kernel the search cost dominates on a
# small machine, and most of the measured candidates come from the first generations anyway.
POPULATION_SIZE = 128
GENETIC_ITERS = 2
TRIALS_PER_ITER = 16
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 100}
LOCAL_TIMEOUT_S = 60
RPC_SESSION_TIMEOUT_S = 60
# Run times at or above this are failed runs (MetaSchedule commits those as 1e10 s).
FAILED_SECS = 1e9
_LOG = logging.getLogger(__name__)


class TuningRecordsWarning(UserWarning):
    """A tuning database that cannot be used; the compile goes on without it."""


@dataclass
class TaskReport:
    """One kernel: records before this run, trials this run measured, best time afterwards."""

    name: str
    records_before: int
    measured: int
    best_secs: float | None


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


# ------------------------------------------------------------------------------------------------
# Targets and runners
# ------------------------------------------------------------------------------------------------
def tuning_target(target: tvm.target.Target, cores: int | None = None) -> tvm.target.Target:
    """``target`` with ``num-cores`` (MetaSchedule's CPU rules need it): ``cores``, else the
    TVM thread pool's size. Targets that have it, and non-``llvm`` targets, are unchanged."""
    if target.kind.name != "llvm" or "num-cores" in target.attrs or "dsa" in target.keys:
        return target
    cores = cores or int(tvm.get_global_func("runtime.NumThreads")())
    return tvm.target.Target({**target.export(), "num-cores": cores})


def parse_tracker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad RPC tracker address {text!r}; expected HOST:PORT")
    return host, int(port)


def rpc_runner(tracker: str, key: str, session_timeout_s: int = RPC_SESSION_TIMEOUT_S):
    """MetaSchedule's ``RPCRunner`` measuring on the RPC servers registered as ``key`` with the
    tracker at ``HOST:PORT``: as many sessions in flight as servers are free now."""
    from tvm.s_tir import meta_schedule as ms

    host, port = parse_tracker(tracker)
    # TVM's own tracker client retries a refused connection for a minute in a background thread
    # (which then keeps the process alive): probe the address first.
    try:
        socket.create_connection((host, port), timeout=session_timeout_s).close()
    except OSError as err:
        raise ValueError(f"cannot reach the RPC tracker at {tracker}: {err.strerror or err}") from None
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_timeout_sec=session_timeout_s)
    try:
        servers = config.count_num_servers(allow_missing=False)
    except (ValueError, OSError, RuntimeError) as err:
        if "Unable to find servers" in str(err):
            raise ValueError(f"no RPC server is registered as {key!r} with the tracker at {tracker}") from None
        raise ValueError(f"the RPC tracker at {tracker} did not answer: {str(err).splitlines()[0]}") from None
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=ms.runner.EvaluatorConfig(**EVALUATOR),
                               max_workers=servers)


def local_runner():
    """MetaSchedule's ``LocalRunner`` (a measuring process on this machine) with our settings."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.LocalRunner(timeout_sec=LOCAL_TIMEOUT_S,
                                 evaluator_config=ms.runner.EvaluatorConfig(**EVALUATOR))


# ------------------------------------------------------------------------------------------------
# Tuning
# ------------------------------------------------------------------------------------------------
def tune(mod: tvm.IRModule, fusion: str, target: tvm.target.Target, trials: int,
         work_dir: str | None = None, *, runner=None, progress: bool = True,
         trials_per_iter: int = TRIALS_PER_ITER, seed: int = 0) -> TuneReport:
    """Tune every kernel strategy ``fusion`` makes of ``mod`` with up to ``trials`` measured
    candidates each, into the JSON database in ``work_dir`` (resumed when it has records).

    ``runner`` is a MetaSchedule runner (:func:`rpc_runner`); ``None`` measures locally.
    ``target`` should come from :func:`tuning_target` (``num-cores`` set).
    """
    if trials < 1:
        raise ValueError("the trial budget must be at least 1")
    get_strategy(fusion)
    work_dir = work_dir or tempfile.mkdtemp(prefix=f"tvm_fusion_tune_{fusion}_")
    with target:
        fused = fusion_pipeline(fusion, target)(mod)
    if "dsa" in target.keys:
        if runner is not None:
            raise ValueError("DSA targets are measured by the simulator; an RPC runner does not apply")
        return _tune_dsa(fused, target, trials, work_dir, progress, trials_per_iter, seed)
    return _tune_cpu(fused, target, trials, work_dir, runner, progress, trials_per_iter, seed)


def tune_strategy(mod: tvm.IRModule, name: str, target: tvm.target.Target, trials_per_task: int,
                  work_dir: str | None = None):
    """``compare --policy tuned``: :func:`tune` without a progress bar; returns the database."""
    return tune(mod, name, target, trials_per_task, work_dir, progress=False).database


def _tune_dsa(fused, target, trials, work_dir, progress, trials_per_iter, seed) -> TuneReport:
    from .target_dsa import tuning as dsa

    report = dsa.tune_kernels(fused, target, work_dir, trials, num_trials_per_iter=trials_per_iter,
                              seed=seed, progress=progress)
    tasks = [TaskReport(k.name, k.records_before, k.measured, k.best_secs) for k in report.kernels]
    return TuneReport(report.database, work_dir, trials, tasks, list(report.skipped))


def _tune_cpu(fused, target, trials, work_dir, runner, progress, trials_per_iter, seed) -> TuneReport:
    from tvm.s_tir import meta_schedule as ms

    database = _open_database(work_dir, target)
    tasks, skipped = [], []
    for task in ms.relax_integration.extract_tasks(fused, target):
        (skipped if task.mod.attrs.get("tirx.is_scheduled", False) else tasks).append(task)
    counts = record_counts(database)
    done_path = os.path.join(work_dir, DONE_FILE)
    done = load_done(done_path)
    remaining = []
    for task in tasks:
        key = workload_key(task.dispatched[0])
        complete = done.get(str(key), 0) >= trials
        remaining.append(0 if complete else max(0, trials - counts.get(key, 0)))
    if sum(remaining) > 0:
        runner = runner or local_runner()
    builder = in_process_builder("candidate.so")
    cost_model = ms.cost_model.XGBModel(extractor=ms.feature_extractor.PerStoreFeature(),
                                        adaptive_training=False, num_warmup_samples=0)
    quiet_meta_schedule(progress)
    bar = progress_bar(sum(remaining), progress)
    measured = []
    for index, (task, left) in enumerate(zip(tasks, remaining)):
        before = database_size(database)
        if left > 0:
            if bar is not None:
                bar.set_description(task.task_name[:40])
            if before_counts(counts, task) == 0:
                _seed_untuned(task, target, database, builder, runner)
                if bar is not None:
                    bar.update(database_size(database) - before)
            searched = left - (database_size(database) - before)
            if searched > 0:
                _tune_task(task, index, searched, target, work_dir, database, builder, runner, cost_model,
                           bar, min(trials_per_iter, searched), seed)
            key = str(workload_key(task.dispatched[0]))
            done[key] = max(trials, done.get(key, 0))
            save_done(done_path, done)
        measured.append(database_size(database) - before)
        if bar is not None and measured[-1] < left:  # the search stopped short: keep the ETA honest
            bar.total -= left - measured[-1]
            bar.refresh()
    if bar is not None:
        bar.close()
    best = _best_secs(database)
    reports = [TaskReport(task.task_name, before_counts(counts, task), new,
                          best.get(workload_key(task.dispatched[0])))
               for task, new in zip(tasks, measured)]
    return TuneReport(database, work_dir, trials, reports, [task.task_name for task in skipped])


def before_counts(counts: dict[int, int], task) -> int:
    """Records a task had when this run started."""
    return counts.get(workload_key(task.dispatched[0]), 0)


def _seed_untuned(task, target, database, builder, runner) -> bool:
    """Measure the ``untuned`` policy's schedule of a kernel with the tuning builder and runner
    and commit it as the kernel's first record (one trial of the budget).

    So the best record is never slower than the untuned schedule (up to measurement noise) even
    with a budget too small for the search to beat it, and evolutionary search starts from it
    (its initial population takes the best measured traces). Nothing is committed when no default
    rule applies, the trace does not replay on the task's module (that is how a record is applied
    when compiling), or the candidate fails to build or run.
    """
    import tvm_ffi
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from .tir_passes.default_schedule import untuned_schedule

    workload_mod = task.dispatched[0]
    sch = untuned_schedule(workload_mod["main"], target)
    if sch is None:
        return _not_seeded(task, "no default rule applies")
    replay = s_tir.Schedule(workload_mod)
    sch.trace.apply_to_schedule(replay, remove_postproc=False)
    if not tvm_ffi.structural_equal(replay.mod, sch.mod):
        return _not_seeded(task, "its trace does not replay")
    (built,) = builder.build([ms.builder.BuilderInput(sch.mod, target)])
    if built.error_msg is not None:
        return _not_seeded(task, built.error_msg)
    args_info = ms.arg_info.ArgInfo.from_prim_func(workload_mod["main"])
    # the device type string MetaSchedule's task scheduler gives runners ("cpu" for llvm)
    device_type = str(tvm.runtime.device(target.get_target_device_type(), 0)).partition(":")[0]
    try:
        (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, device_type, args_info)])
        result = future.result()
    finally:
        shutil.rmtree(os.path.dirname(built.artifact_path), ignore_errors=True)
    if result.error_msg is not None or not result.run_secs:
        return _not_seeded(task, result.error_msg or "no run time")
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, database.commit_workload(workload_mod), result.run_secs, target, args_info))
    return True


def _not_seeded(task, why: str) -> bool:
    lines = [line for line in why.splitlines() if line.strip()]
    _LOG.warning("untuned schedule of %s not measured: %s", task.task_name, lines[-1] if lines else why)
    return False


def _tune_task(task, index, trials, target, work_dir, database, builder, runner, cost_model, bar,
               trials_per_iter, seed) -> None:
    """One task with MetaSchedule's own space for the target (``post-order-apply``)."""
    from tvm.s_tir import meta_schedule as ms

    logger = task_logger(work_dir, index, task.task_name)
    try:
        with only_tensor_intrinsics(tensor_intrin_families(target)):
            context = ms.TuneContext(
                mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                search_strategy=ms.search_strategy.EvolutionarySearch(
                    population_size=POPULATION_SIZE, genetic_num_iters=GENETIC_ITERS,
                    init_min_unmeasured=min(50, POPULATION_SIZE // 2)),
                task_name=task.task_name, logger=logger, rand_state=seed + index,
                num_threads="physical")
        ms.tune_tasks(tasks=[context], task_weights=[1.0], work_dir=work_dir,
                      max_trials_global=trials, max_trials_per_task=trials,
                      num_trials_per_iter=trials_per_iter, builder=builder, runner=runner,
                      database=database, cost_model=cost_model,
                      measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                         trial_progress(bar)],
                      task_scheduler="round-robin")
    finally:
        close_logger(logger)


def database_size(database) -> int:
    return len(database.get_all_tuning_records())


def _best_secs(database) -> dict[int, float]:
    """Per workload key, the best mean run time of a successful record."""
    best: dict[int, float] = {}
    for record in database.get_all_tuning_records():
        if not record.run_secs:
            continue
        secs = sum(float(s) for s in record.run_secs) / len(record.run_secs)
        if secs >= FAILED_SECS or not math.isfinite(secs):
            continue
        key = workload_key(record.workload.mod)
        best[key] = min(secs, best.get(key, secs))
    return best


# ------------------------------------------------------------------------------------------------
# Opening a database
# ------------------------------------------------------------------------------------------------
def open_records(work_dir: str, target) -> object | None:
    """The tuning database ``tvm-fusion tune`` wrote in ``work_dir``, for a compile with
    ``--tuning-records``; ``None`` (and a :class:`TuningRecordsWarning` naming the directory or
    file) when it is missing, corrupt or truncated: the compile then goes on untuned."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    try:
        return _open_database(work_dir, target, create=False)
    except ValueError as err:
        warnings.warn(f"{err}; compiling without tuning records", TuningRecordsWarning, stacklevel=2)
        return None


def _open_database(work_dir: str, target: tvm.target.Target, create: bool = True):
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
            from .target_dsa.tuning import open_database

            return open_database(work_dir, target)
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

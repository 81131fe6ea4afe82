"""The CPU tuning driver: MetaSchedule's own design space over the kernels of a fused module.

Each kernel gets up to ``trials`` measured candidates (a per-task budget), one task after the
other. The first is the ``untuned`` policy's own schedule (:func:`_seed_untuned`), so the tuned
compile is never slower than the untuned one; the rest come from MetaSchedule's post-order-apply
space for the target, evolutionary search ranked by the XGBoost cost model, compiled by the
in-process builder (:mod:`.ms_builder`: the default builder's popen workers time out on small
machines). Measurement is local (``LocalRunner``) or distributed
(:func:`rpc_runner`: MetaSchedule's ``RPCRunner`` asks an RPC tracker for a server registered under
a key, uploads the ``.so`` built here and times it there, one session per candidate, as many in
flight as servers). The records go to the JSON database in ``work_dir``, resumed as
:class:`.core.Resume` says. A tqdm bar counts the trials.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket

import tvm

from .core import Resume, TaskReport, TuneReport, successful_secs, workload_key
from .database import open_checked_database
from .ms_builder import (
    close_logger,
    in_process_builder,
    only_tensor_intrinsics,
    progress_bar,
    quiet_meta_schedule,
    task_logger,
    tensor_intrin_families,
    trial_progress,
)

# Search and measurement settings, in one place. The population is smaller than MetaSchedule's
# default (512): with budgets of a few dozen trials per kernel the search cost dominates on a
# small machine, and most of the measured candidates come from the first generations anyway.
POPULATION_SIZE = 128
GENETIC_ITERS = 2
TRIALS_PER_ITER = 16
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 100}
LOCAL_TIMEOUT_S = 60
RPC_SESSION_TIMEOUT_S = 60
_LOG = logging.getLogger(__name__)


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
def tune_kernels(fused: tvm.IRModule, target: tvm.target.Target, work_dir: str, trials: int, *,
                 runner=None, num_trials_per_iter: int = TRIALS_PER_ITER, seed: int = 0,
                 progress: bool = True) -> TuneReport:
    """Tune every kernel of the fused module ``fused`` with up to ``trials`` measured candidates
    each, into the JSON database in ``work_dir`` (resumed when it has records). ``runner`` is a
    MetaSchedule runner (:func:`rpc_runner`); ``None`` measures locally."""
    from tvm.s_tir import meta_schedule as ms

    database = open_checked_database(work_dir, target)
    tasks, skipped = [], []
    for task in ms.relax_integration.extract_tasks(fused, target):
        (skipped if task.mod.attrs.get("tirx.is_scheduled", False) else tasks).append(task)
    resume = Resume(database, work_dir, trials)
    remaining = [resume.remaining(task.dispatched[0]) for task in tasks]
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
            if resume.records_before(task.dispatched[0]) == 0:
                _seed_untuned(task, target, database, builder, runner)
                if bar is not None:
                    bar.update(database_size(database) - before)
            searched = left - (database_size(database) - before)
            if searched > 0:
                _tune_task(task, index, searched, target, work_dir, database, builder, runner, cost_model,
                           bar, min(num_trials_per_iter, searched), seed)
            resume.mark_done(task.dispatched[0])
        measured.append(database_size(database) - before)
        if bar is not None and measured[-1] < left:  # the search stopped short: keep the ETA honest
            bar.total -= left - measured[-1]
            bar.refresh()
    if bar is not None:
        bar.close()
    best = _best_secs(database)
    reports = [TaskReport(task.task_name, resume.records_before(task.dispatched[0]), new,
                          best.get(workload_key(task.dispatched[0])))
               for task, new in zip(tasks, measured)]
    return TuneReport(database, work_dir, trials, reports, [task.task_name for task in skipped])


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

    from ..tir_passes.default_schedule import untuned_schedule

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
        secs = successful_secs(record)
        if secs is not None:
            key = workload_key(record.workload.mod)
            best[key] = min(secs, best.get(key, secs))
    return best

"""MetaSchedule pieces shared by the tuning drivers (:mod:`.cpu`, :mod:`.dsa`): the in-process
builder, on-demand tensor intrinsics, per-task loggers and the trial progress bar."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import tempfile
import types

import tvm


def in_process_builder(artifact: str = "candidate.tar"):
    """A MetaSchedule builder that compiles candidates in this process.

    MetaSchedule's default ``LocalBuilder`` starts a popen pool whose workers each import
    ``tvm.s_tir.tensor_intrin`` (about 23 s on a 2-core machine), so every candidate times out
    (measured on this project's 2-core CI machines). Building in-process avoids that start-up.
    ``artifact`` is the file name the candidate is exported as (``.so``: linked here, so a
    runner can ship it to an RPC server that has no compiler).
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for build_input in build_inputs:
                try:
                    executable = tvm.compile(build_input.mod, target=build_input.target)
                    path = os.path.join(tempfile.mkdtemp(prefix="tvm_fusion_ms_"), artifact)
                    executable.export_library(path)
                    results.append(BuilderResult(path, None))
                except Exception as err:  # noqa: BLE001 - a failed candidate must not stop tuning
                    results.append(BuilderResult(None, str(err)))
            return results

    return InProcessBuilder()


# ---- tensor intrinsics ---------------------------------------------------------------------------
_TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"
# CPU architecture (from the target's mtriple, else this machine) -> the intrinsic module its
# MetaSchedule rules can tensorize with (vnni / avx512 on x86, neon / dotprod on ARM, RVV).
_CPU_INTRIN_FAMILIES = {"x86_64": "x86", "i386": "x86", "i686": "x86", "aarch64": "arm_cpu",
                        "arm": "arm_cpu", "riscv": "riscv_cpu"}


def tensor_intrin_families(target: tvm.target.Target) -> tuple[str, ...] | None:
    """The ``tvm.s_tir.tensor_intrin`` submodules a MetaSchedule space for ``target`` can use.

    ``()`` for the DSA (its own intrinsic only) and for CPUs without a family, one family for
    ``llvm`` CPUs, ``None`` (all of them) for anything else (GPUs).
    """
    if "dsa" in target.keys:
        return ()
    if target.kind.name != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", "")) or os.uname().machine
    arch = triple.split("-")[0]
    return tuple({family for prefix, family in _CPU_INTRIN_FAMILIES.items() if arch.startswith(prefix)})


@contextlib.contextmanager
def only_tensor_intrinsics(families: tuple[str, ...] | None):
    """Make ``import tvm.s_tir.tensor_intrin`` load only ``families`` while the context is open.

    ``TuneContext`` imports the whole package, which registers every CUDA/x86/ARM/Hexagon
    intrinsic by parsing TVMScript: ~23 s on an idle 2-core machine, minutes
    under load. The families a target needs are imported for real (their intrinsics stay
    registered); the package itself is a stand-in that is removed afterwards, so a later import
    anywhere in the process loads the complete package. ``None``, or a package that is already
    imported, changes nothing.
    """
    if families is None or _TENSOR_INTRIN in sys.modules:
        yield
        return
    import tvm.s_tir

    stand_in = types.ModuleType(_TENSOR_INTRIN)
    stand_in.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
    sys.modules[_TENSOR_INTRIN] = stand_in
    try:
        for family in families:
            importlib.import_module(f"{_TENSOR_INTRIN}.{family}")
        yield
    finally:
        sys.modules.pop(_TENSOR_INTRIN, None)


# ---- logs and progress ---------------------------------------------------------------------------
def task_logger(work_dir: str, index: int, name: str) -> logging.Logger:
    """A logger writing one task's search log to ``work_dir/logs/task_<i>_<name>.log``.

    (``ms.logging.get_loggers_from_work_dir`` re-configures logging globally and fails when
    called again in a process whose loggers have unnamed handlers, e.g. under pytest.)
    Close it with :func:`close_logger`.
    """
    log_dir = os.path.join(work_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(log_dir, f"task_{index:03d}_{name[:100]}.log"))
    logger = logging.getLogger(f"{__name__}.task.{abs(hash(path))}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def quiet_meta_schedule(progress: bool) -> None:
    """Keep the console for the progress bar (MetaSchedule's own logs go to ``work_dir/logs``)."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    if progress and ms_logger.level == logging.NOTSET:
        ms_logger.setLevel(logging.WARNING)


def progress_bar(total: int, enabled: bool):
    """A tqdm bar over ``total`` trials, or ``None`` when disabled or there is nothing to do."""
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="trial", dynamic_ncols=True)


def trial_progress(bar):
    """A MetaSchedule measure callback that advances ``bar`` (may be ``None``) per measured trial."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class TrialProgress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            if bar is not None:
                bar.update(len(runner_results))

    return TrialProgress()

"""Tuning the kernels one fusion strategy makes of a model: what ``tvm-fusion tune`` and
``compare --policy tuned`` run.

1. the model is fused by the strategy (:func:`tvm_fusion_ext.pipelines.fusion_pipeline`:
   pre-processing, fusion, FuseTIR) and the tasks are extracted from *that* module
   (``tvm.s_tir.meta_schedule.relax_integration``'s ``tune_relax`` path would re-fuse with the
   built-in FuseOps);
2. the target's driver tunes them: :mod:`.cpu` (MetaSchedule's space, measured locally or over
   RPC) or, for DSA targets, :mod:`.dsa` (its own design space, simulated builder and runner);
3. a second run with the same work directory resumes (:class:`.core.Resume`).

The compile side is ``pipelines.pipeline(..., policy="tuned")`` under the database
:func:`.database.open_records` returns.
"""

from __future__ import annotations

import tempfile

import tvm

from ..pipelines import fusion_pipeline, get_strategy
from . import cpu, dsa
from .core import TuneReport


def tune(mod: tvm.IRModule, fusion: str, target: tvm.target.Target, trials: int,
         work_dir: str | None = None, *, runner=None, progress: bool = True,
         trials_per_iter: int = cpu.TRIALS_PER_ITER, seed: int = 0,
         cost_check: bool = True) -> TuneReport:
    """Tune every kernel strategy ``fusion`` makes of ``mod`` with up to ``trials`` measured
    candidates each, into the JSON database in ``work_dir`` (resumed when it has records).

    ``runner`` is a MetaSchedule runner (:func:`.cpu.rpc_runner`); ``None`` measures locally.
    ``target`` should come from :func:`.cpu.tuning_target` (``num-cores`` set). ``cost_check``: as
    for :func:`~tvm_fusion_ext.pipelines.fusion_pipeline` (compile with the same setting).
    """
    if trials < 1:
        raise ValueError("the trial budget must be at least 1")
    get_strategy(fusion)
    work_dir = work_dir or tempfile.mkdtemp(prefix=f"tvm_fusion_tune_{fusion}_")
    with target:
        fused = fusion_pipeline(fusion, target, cost_check)(mod)
    if "dsa" in target.keys:
        if runner is not None:
            raise ValueError("DSA targets are measured by the simulator; an RPC runner does not apply")
        return dsa.tune_kernels(fused, target, work_dir, trials, num_trials_per_iter=trials_per_iter,
                                seed=seed, progress=progress)
    return cpu.tune_kernels(fused, target, work_dir, trials, runner=runner,
                            num_trials_per_iter=trials_per_iter, seed=seed, progress=progress)


def tune_strategy(mod: tvm.IRModule, name: str, target: tvm.target.Target, trials_per_task: int,
                  work_dir: str | None = None, cost_check: bool = True):
    """``compare --policy tuned``: :func:`tune` without a progress bar; returns the database."""
    return tune(mod, name, target, trials_per_task, work_dir, progress=False,
                cost_check=cost_check).database

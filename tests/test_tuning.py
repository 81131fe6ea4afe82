"""``tvm_fusion_ext.tuning`` / ``tvm-fusion tune``: tasks from the strategy's
own fused module, resuming from the work directory, records picked up by the ``tuned`` policy,
and a corrupt database giving a warning instead of a failed compile."""

import math
import os
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from cases.foundation import ConvBiasReluSoftmax
from dsa_cases.relax_mods import MatmulBias
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_fusion_ext import tuning
from tvm_fusion_ext.cli import main
from tvm_fusion_ext.driver import evaluation
from tvm_fusion_ext.pipelines import fusion_pipeline
from tvm_fusion_ext.testing import verify
from tvm_fusion_ext.tir_passes.default_schedule import untuned_schedule

TARGET = tuning.tuning_target(evaluation.parse_target("llvm"), 2)
TRIALS = 3


@pytest.fixture(scope="module")
def runner():
    """One local runner (its measuring process starts once) for every tuning run here."""
    return tuning.local_runner()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, runner):
    """Two runs with the same directory: the second one must resume, not re-measure."""
    work_dir = str(tmp_path_factory.mktemp("tune"))
    first = tuning.tune(ConvBiasReluSoftmax, "stock", TARGET, TRIALS, work_dir, runner=runner, progress=False)
    second = tuning.tune(ConvBiasReluSoftmax, "stock", TARGET, TRIALS, work_dir, runner=runner, progress=False)
    return work_dir, first, second


def _record_lines(work_dir):
    with open(os.path.join(work_dir, tuning.RECORD_FILE)) as f:
        return f.read().splitlines()


def test_tasks_are_the_kernels_of_the_strategy(tuned):
    _, first, _ = tuned
    with TARGET:
        fused = fusion_pipeline("stock", TARGET)(ConvBiasReluSoftmax)
    kernels = {gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert {task.name for task in first.tasks} == kernels
    assert any(name.startswith("fused_conv2d") for name in kernels)


def test_first_run_measures_every_kernel_within_budget(tuned):
    work_dir, first, _ = tuned
    assert all(1 <= task.measured <= TRIALS and task.records_before == 0 for task in first.tasks)
    assert len(_record_lines(work_dir)) == first.measured
    for task in first.tasks:
        assert task.best_secs is not None and 0 < task.best_secs < tuning.FAILED_SECS


def test_every_kernel_has_a_record_of_its_untuned_schedule(tuned):
    """So the tuned compile is never slower than the untuned one, whatever the budget. (The search
    may also find the same schedule again: a plain parallel + vectorised kernel is in its space.)"""
    _, first, _ = tuned
    matches: dict[int, list[bool]] = {}
    for record in first.database.get_all_tuning_records():
        workload_mod = record.workload.mod
        untuned = untuned_schedule(workload_mod["main"], TARGET)
        sch = tvm.s_tir.Schedule(workload_mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        matches.setdefault(tvm_ffi.structural_hash(workload_mod), []).append(
            tvm_ffi.structural_equal(sch.mod, untuned.mod))
    assert len(matches) == len(first.tasks)
    assert all(any(found) for found in matches.values()), matches


def test_rerun_with_the_same_directory_resumes(tuned):
    work_dir, first, second = tuned
    assert second.measured == 0
    assert [t.records_before for t in second.tasks] == [t.measured for t in first.tasks]
    assert len(_record_lines(work_dir)) == first.measured
    assert "resumed" in second.summary() and f"{len(first.tasks)} of them already tuned" in second.summary()


def test_larger_budget_measures_only_the_difference(tuned, tmp_path, runner):
    work_dir = str(tmp_path / "more")
    shutil.copytree(tuned[0], work_dir)
    more = tuning.tune(ConvBiasReluSoftmax, "stock", TARGET, TRIALS + 1, work_dir, runner=runner,
                       progress=False)
    assert all(task.measured <= 1 for task in more.tasks)
    conv = next(task for task in more.tasks if task.name.startswith("fused_conv2d"))
    assert conv.records_before == TRIALS and conv.measured == 1


def test_compile_picks_the_records_up(tuned):
    work_dir, first, _ = tuned
    database = tuning.open_records(work_dir, TARGET)
    assert database is not None and len(database.get_all_tuning_records()) == first.measured
    with TARGET:
        fused = fusion_pipeline("stock", TARGET)(ConvBiasReluSoftmax)
    with TARGET, database:
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    scheduled = {gv.name_hint for gv, f in applied.functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc) and f.attrs.get("tirx.is_scheduled", False)}
    assert scheduled == {task.name for task in first.tasks}
    inputs = verify.random_inputs(ConvBiasReluSoftmax["main"])
    expected = verify.run(verify.build(ConvBiasReluSoftmax, "none", TARGET, "unscheduled"), inputs)
    with database:
        actual = verify.run(verify.build(ConvBiasReluSoftmax, "stock", TARGET, "tuned"), inputs)
    verify.assert_allclose_by_dtype(actual, expected, context="tuned")
    assert np.abs(expected[0]).max() > 0


@pytest.mark.parametrize("damage", ["truncate_record", "garbage_workload", "bad_index"])
def test_corrupt_database_warns_and_returns_none(tuned, tmp_path, damage):
    work_dir = str(tmp_path / "db")
    shutil.copytree(tuned[0], work_dir)
    name = tuning.WORKLOAD_FILE if damage == "garbage_workload" else tuning.RECORD_FILE
    path = os.path.join(work_dir, name)
    with open(path) as f:
        lines = f.read().splitlines()
    if damage == "truncate_record":
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    elif damage == "garbage_workload":
        lines.append('["123", 4')
    else:
        lines[0] = "[99," + lines[0].split(",", 1)[1]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.warns(tuning.TuningRecordsWarning, match=name):
        assert tuning.open_records(work_dir, TARGET) is None
    with pytest.raises(ValueError, match=name):
        tuning.tune(ConvBiasReluSoftmax, "stock", TARGET, TRIALS, work_dir, progress=False)


def test_missing_directory_warns_and_returns_none(tmp_path):
    with pytest.warns(tuning.TuningRecordsWarning, match="no such tuning directory"):
        assert tuning.open_records(str(tmp_path / "absent"), TARGET) is None
    os.makedirs(tmp_path / "empty")
    with pytest.warns(tuning.TuningRecordsWarning, match="missing tuning database file"):
        assert tuning.open_records(str(tmp_path / "empty"), TARGET) is None


def test_dsa_target_delegates_to_the_dsa_tuner(tmp_path):
    target = tvm.target.Target("dsa/stcp920")
    report = tuning.tune(MatmulBias, "stock", target, 2, str(tmp_path), progress=False)
    assert [task.name for task in report.tasks] == ["fused_matmul_add"]
    assert report.measured == 2 and math.isfinite(report.tasks[0].best_secs)
    assert os.path.exists(tmp_path / tuning.DONE_FILE)
    assert isinstance(tuning.open_records(str(tmp_path), target), ms.database.JSONDatabase)


def test_cli_tune_resumes_and_prints_the_compile_command(tuned, tmp_path, capsys, monkeypatch):
    """The CLI on the fixture's directory (the model loader stubbed: no zoo import needed)."""
    work_dir = str(tmp_path / "cli")
    shutil.copytree(tuned[0], work_dir)
    workload = evaluation.Workload("convbias", "torch", ConvBiasReluSoftmax, [], [], "none")
    monkeypatch.setattr(evaluation, "load_workload", lambda model, args, importer, input_shapes=None: workload)
    argv = ["tune", "convbias", "--target", '{"kind": "llvm", "num-cores": 2}', "--trials", str(TRIALS),
            "--work-dir", work_dir, "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "0 trials measured this run" in out and "resumed" in out
    assert all(task.name in out for task in tuned[1].tasks)
    assert f"--fusion stock --tuning-records {work_dir}" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--rpc-tracker", "127.0.0.1:9190"], "--rpc-tracker and --rpc-key go together"),
    (["--rpc-tracker", "nohost", "--rpc-key", "k"], "bad RPC tracker address"),
    (["--fusion", "nope"], "unknown fusion strategy"),
    (["--trials", "0"], "--trials must be at least 1"),
])
def test_cli_tune_bad_input_is_one_line(tmp_path, capsys, argv, message):
    base = ["tune", "apollo_fig3", "--trials", "2", "--work-dir", str(tmp_path)]
    # a later option wins in argparse, so the bad value overrides the base one
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1

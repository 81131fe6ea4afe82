"""MetaSchedule on dsa/stcp920: the DSA design space, the simulated
builder/runner with XGBoost, resuming from the JSON database, and compiling with the records."""

import numpy as np
import pytest
import tvm
from dsa_cases.relax_mods import MatmulBias
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_ext  # noqa: F401
from tvm_fusion_ext.pipelines import fusion_pipeline, pipeline
from tvm_fusion_ext.target_dsa import profile
from tvm_fusion_ext.target_dsa.kernel_model import kernel_model
from tvm_fusion_ext.target_dsa.schedule import stage_kernel
from tvm_fusion_ext.target_dsa.simulator import fits
from tvm_fusion_ext.target_dsa.target import spec_of_target
from tvm_fusion_ext.testing.verify import run
from tvm_fusion_ext.tuning import dsa as tuning

TARGET = tvm.target.Target("dsa/stcp920")
SPEC = spec_of_target(TARGET)
TRIALS = 12


def _inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, [int(d) for d in p.ty.shape]).astype("float32")
            for p in mod["main"].params]


@pytest.fixture(scope="module")
def fused():
    with TARGET:
        return fusion_pipeline("stock", TARGET)(MatmulBias)


@pytest.fixture(scope="module")
def tuned(fused, tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp("tune_dsa"))
    first = tuning.tune_kernels(fused, TARGET, work_dir, TRIALS, progress=False)
    second = tuning.tune_kernels(fused, TARGET, work_dir, TRIALS, progress=False)
    return work_dir, first, second


@pytest.fixture(scope="module")
def executables(tuned):
    work_dir = tuned[0]
    untuned = tvm.compile(MatmulBias, target=TARGET, relax_pipeline=pipeline("stock", TARGET, "untuned"))
    with tuning.open_database(work_dir, TARGET):
        best = tvm.compile(MatmulBias, target=TARGET, relax_pipeline=pipeline("stock", TARGET, "tuned"))
    return untuned, best


def test_space_holds_the_untuned_choice_and_only_lb_fitting_tiles(fused):
    func = fused["fused_matmul_add"]
    space = tuning.kernel_space(func, SPEC)
    assert space.decisions(space.index_of(space.default)) == space.default
    assert space.matrix == (True, False) and None in space.k_chunk and len(space.cores) > 1
    smallest = min(c for c in space.k_chunk if c is not None)
    for tile in space.tile:
        decisions = tuning.Decisions(tile, smallest, False, False, SPEC.num_cores)
        assert fits(kernel_model(stage_kernel(func, SPEC, decisions).mod["main"]), SPEC), tile


def test_mutator_moves_one_sampled_decision(fused):
    func = fused["fused_matmul_add"]
    space = tuning.kernel_space(func, SPEC)
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    tuning.sample_decisions(sch, tuning.carrier_block(sch), space,
                            forced=space.index_of(space.default))
    trace = sch.trace
    mutated = tuning.MutateDSADecision(seed=1).apply(trace)
    before, after = tuning._trace_choice(trace), tuning._trace_choice(mutated)
    assert sum(before[k] != after[k] for k in before) == 1


def test_tuned_is_not_slower_than_untuned(tuned, executables):
    _, first, _ = tuned
    (kernel,) = first.tasks
    assert first.measured == TRIALS and kernel.measured == TRIALS
    assert kernel.best_secs <= kernel.default_secs
    inputs = _inputs(MatmulBias)
    untuned, best = (profile(ex, inputs, TARGET) for ex in executables)
    # The seed record is the untuned schedule, and the tuned executable runs the best record.
    assert untuned["cycles"] == round(kernel.default_secs * SPEC.clock_hz)
    assert best["cycles"] == round(kernel.best_secs * SPEC.clock_hz)
    assert best["cycles"] <= untuned["cycles"]


def test_second_run_replays_the_database_without_measuring(tuned):
    work_dir, first, second = tuned
    assert second.measured == 0
    (kernel,) = second.tasks
    assert kernel.records_before == TRIALS and kernel.measured == 0
    assert kernel.best_secs == first.tasks[0].best_secs
    database = tuning.open_database(work_dir, TARGET)
    assert len(database.get_all_tuning_records()) == TRIALS
    # A record replays to the schedule it was measured with.
    workload = database.get_all_tuning_records()[0].workload
    record = database.get_top_k(workload, 1)[0]
    sch = database.query_schedule(workload.mod, TARGET, "main")
    assert tuning.simulate_model(kernel_model(sch.mod["main"]), SPEC) == pytest.approx(
        float(record.run_secs[0]), rel=1e-6)


def test_tuned_compilation_computes_the_right_numbers(executables):
    inputs = _inputs(MatmulBias, seed=1)
    expected = run(tvm.compile(MatmulBias, target="llvm"), inputs)[0]
    for executable in executables:
        np.testing.assert_allclose(run(executable, inputs)[0], expected, rtol=1e-4, atol=1e-4)


@I.ir_module
class MaxPool:
    @R.function
    def main(x: R.Tensor((1, 16, 16, 16), "float32")):
        with R.dataflow():
            y = R.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
            R.output(y)
        return y


def test_pooling_kernel_is_searched_despite_its_schedule_rule_annotation(tmp_path):
    # LegalizeOps tags the pooling block with schedule_rule = meta_schedule.pool_max, which makes
    # PostOrderApply skip rules for it; the ScheduleFn space still samples its decisions.
    with TARGET:
        mod = fusion_pipeline("stock", TARGET)(MaxPool)
    report = tuning.tune_kernels(mod, TARGET, str(tmp_path), 4, progress=False)
    (kernel,) = report.tasks
    assert kernel.measured == 4
    assert len(tuning.open_database(str(tmp_path), TARGET).get_all_tuning_records()) == 4

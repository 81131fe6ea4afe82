"""Random-graph fuzzing of every fusion strategy, and the invariant instrument.

The bounded run: ``SHARDS`` x ``EXAMPLES`` hypothesis-generated modules, each compiled under every
registered strategy for LLVM (without LLVM's own optimisations, see ``differential.FAST_LLVM``) with
the invariant checks on, and compared with the unfused module; ``DSA_EXAMPLES`` smaller modules do
the same on ``dsa/stcp920``. A failure is shrunk by hypothesis and saved under
``tests/regressions/`` (then checked for good by ``test_regressions.py``). Longer runs:
``scripts/fuzz.py --cases N``.
"""

import importlib.util
import json
import os
from collections import Counter
from pathlib import Path

import hypothesis
import pytest
import tvm
import tvm_ffi
from hypothesis import HealthCheck, settings
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import tvm_fusion_ext
from tvm_fusion_ext import pipelines
from tvm_fusion_ext.pipelines import instrument, registry
from tvm_fusion_ext.testing import differential, verify
from tvm_fusion_ext.testing.random_graphs import (
    GraphConfig,
    RecordedChoices,
    build_module,
    modules,
    random_module,
    shrink_choices,
)

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "tests" / "regressions"
SHARDS = 2
EXAMPLES = 35  # per shard: SHARDS * EXAMPLES random graphs under every strategy
CONFIG = GraphConfig(max_ops=6)  # about a third of the compile time of the default 10 steps
DSA_EXAMPLES = 4
DSA_CONFIG = GraphConfig(max_ops=5, max_inputs=2)
STRATEGIES = tvm_fusion_ext.fusion_names()


def _fuzz(strategy, examples: int, seed: int, targets) -> int:
    """Check ``examples`` modules of ``strategy``; on a failure save the shrunk module and fail.

    Once a case fails, shrinking re-checks only the failing strategies and keeps only failures
    with the same signature (strategy, kind, exception type), so each shrink step is cheap and
    the shrunk module fails the same way."""
    last: dict = {"count": 0}
    focus: dict = {}

    @hypothesis.seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @hypothesis.given(strategy)
    def check(mod):
        result = differential.check_module(mod, focus.get("strategies"), targets=targets)
        failures = [f for f in result.failures
                    if "signatures" not in focus or f.signature in focus["signatures"]]
        last.update(mod=mod, failures=failures, count=last["count"] + 1)
        if failures and not focus:
            focus["signatures"] = {f.signature for f in failures}
            focus["strategies"] = sorted({f.strategy for f in failures} & set(STRATEGIES)) or None
        assert not failures

    try:
        check()
    except Exception:  # the last run is hypothesis' final replay of the shrunk example
        if not last.get("failures"):
            raise
        path = differential.save_regression(last["mod"], last["failures"], REGRESSIONS,
                                            origin=f"tests/test_fuzz.py, hypothesis seed {seed}")
        failures = "\n".join(map(str, last["failures"]))
        pytest.fail(f"fuzzing failed; shrunk module saved as {path}:\n{failures}")
    return last["count"]


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_graphs_under_every_strategy(shard):
    count = _fuzz(modules(CONFIG), EXAMPLES, seed=shard, targets=[differential.FAST_LLVM])
    assert count >= EXAMPLES


def test_random_graphs_on_the_dsa():
    count = _fuzz(modules(DSA_CONFIG), DSA_EXAMPLES, seed=100, targets=[differential.DSA_TARGET])
    assert count >= DSA_EXAMPLES


# ---- the generator ----------------------------------------------------------------------------

def _ops_used(mod) -> Counter:
    ops: Counter = Counter()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops[expr.op.name.removeprefix("relax.").removeprefix("nn.")] += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return ops


def test_generator_covers_the_vocabulary_and_shapes_of_graphs():
    mods = [random_module(seed) for seed in range(150)]
    assert all(relax.analysis.check_well_formed(m) for m in mods)
    used = sum((_ops_used(m) for m in mods), Counter())
    for op in ["relu", "sigmoid", "exp", "add", "multiply", "maximum", "sum", "mean", "max",
               "softmax", "layer_norm", "matmul", "conv2d", "reshape", "permute_dims",
               "strided_slice", "concat", "split", "take"]:
        assert used[op] > 0, f"{op} never generated"
    assert any(isinstance(m["main"].body.body, relax.Tuple) for m in mods)  # multiple outputs
    uses = [max(Counter(v for b in m["main"].body.blocks[0].bindings
                        for v in relax.analysis.free_vars(b.value)).values()) for m in mods]
    assert max(uses) >= 3  # wide fan-outs
    lengths = [len(m["main"].body.blocks[0].bindings) for m in mods]
    assert max(lengths) >= 15 and min(lengths) <= 3  # long chains and tiny graphs


def test_seeded_generator_is_reproducible():
    assert random_module(7).script() == random_module(7).script()
    assert random_module(7).script() != random_module(8).script()
    choices = RecordedChoices(7)
    mod = build_module(choices)
    assert build_module(RecordedChoices(values=choices.values)).script() == mod.script()


def test_shrinking_keeps_the_failure_and_removes_the_rest():
    values = next(c.values for c in (RecordedChoices(s) for s in range(100))
                  if _ops_used(build_module(c))["matmul"] and len(c.values) > 40)

    def has_matmul(candidate):
        return _ops_used(build_module(RecordedChoices(values=candidate)))["matmul"] > 0

    best = shrink_choices(values, has_matmul, budget=300)
    shrunk = build_module(RecordedChoices(values=best))
    assert has_matmul(best) and len(best) < len(values)
    assert sum(_ops_used(shrunk).values()) == 1  # the matmul alone


# ---- differential helpers -----------------------------------------------------------------------

def test_compiling_a_fused_module_leaves_it_unchanged():
    """Regression: the default schedule used to update the caller's IRModule in place."""
    mod = random_module(3)
    for target in [differential.FAST_LLVM, differential.DSA_TARGET]:
        fused = differential.fuse(mod, "stock", target)
        before = fused.script()
        differential.compile_fused(fused, target)
        assert fused.script() == before


def test_regression_file_round_trip(tmp_path):
    mod = random_module(11)
    failure = differential.Failure("stock", "llvm", "mismatch", 'AssertionError: """x"""\nmore')
    path = differential.save_regression(mod, [failure], tmp_path, origin="a test")
    loaded, failed, xfail = differential.load_regression(path)
    tvm.ir.assert_structural_equal(loaded, mod)
    assert failed == [("stock", "llvm", "mismatch")] and xfail == {}
    assert path.name == differential.regression_name([failure], mod) + ".py"


def test_fuzz_script_summary(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("fuzz_script", ROOT / "scripts" / "fuzz.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "fuzz.json"
    status = script.main(["--cases", "2", "--seed", "5", "--strategies", "none,stock", "--target",
                          "llvm", "--json", str(out), "--save-dir", str(tmp_path / "regs")])
    assert status == 0
    summary = json.loads(out.read_text())
    assert summary["cases"] == 2 and summary["strategies"] == ["none", "stock"]
    assert summary["checks"] == 4 and summary["failures"] == [] and summary["files"] == []
    assert "| strategy | target | kind | failing cases |" in capsys.readouterr().out


# ---- the invariant instrument -------------------------------------------------------------------

@I.ir_module
class TwoKernels:
    @T.prim_func(private=True, s_tir=True)
    def exp(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("exp"):
                vi = T.axis.spatial(4, i)
                B[vi] = T.exp(A[vi])

    @T.prim_func(private=True, s_tir=True)
    def relu(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("relu"):
                vi = T.axis.spatial(4, i)
                B[vi] = T.max(A[vi], T.float32(0))

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = TwoKernels
        with R.dataflow():
            a = R.call_tir(cls.exp, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.relu, (a,), out_ty=R.Tensor((4,), "float32"))
            R.output(b)
        return b


def _drop_first_kernel(mod):
    """``main`` with its first kernel call removed (its result replaced by the input)."""
    main = mod["main"]
    block = main.body.blocks[0]
    first, rest = block.bindings[0], block.bindings[1:]
    value = relax.call_tir(rest[0].value.args[0], (main.params[0],), out_ty=rest[0].var.ty)
    body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(rest[0].var, value)])],
                         main.body.body)
    assert first.var.name == "a"
    return _with_main(mod, body)


def _pass(name, fn):
    return tvm.transform.module_pass(lambda mod, _ctx: fn(mod), opt_level=0, name=name)


def _use_before_def(mod):
    main = mod["main"]
    block = main.body.blocks[0]
    swapped = relax.DataflowBlock(list(reversed(block.bindings)))
    return _with_main(mod, relax.SeqExpr([swapped], main.body.body))


def _with_main(mod, body):
    main = mod["main"]
    out = mod.clone()
    body = relax.BlockBuilder(mod).normalize(body)
    out["main"] = relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
    return out


def test_invariants_catch_a_lost_binding():
    bad = _pass("tvm_fusion_ext.MaterializePartition", _drop_first_kernel)
    assert bad(TwoKernels) is not None  # unchecked, the bad pass goes through
    with instrument.checking_invariants(), pytest.raises(instrument.InvariantError,
                                                         match="lost .*call_tir exp"):
        instrument.run_checked(bad, TwoKernels)


@I.ir_module
class WithDeadCode:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        with R.dataflow():
            a = R.exp(x)
            b = R.nn.relu(a)
            unused = R.tanh(R.exp(a))  # noqa: F841
            R.output(b)
        return b


def test_dead_code_dropped_by_fuse_ops_is_not_a_lost_binding():
    legal = tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                      relax.transform.AnnotateTIROpPattern()])(WithDeadCode)
    with instrument.checking_invariants():
        fused = instrument.run_checked(relax.transform.FuseOps(), legal)
    assert instrument.calls_per_inference(fused) == instrument.calls_per_inference(legal)
    assert sum(instrument.calls_per_inference(legal).values()) == 2  # exp, relu: tanh(exp) is dead


def test_invariants_catch_an_ill_formed_module_and_name_the_pass():
    bad = _pass("ReorderBadly", _use_before_def)
    with instrument.checking_invariants(), pytest.raises(instrument.InvariantError,
                                                         match="not well-formed after pass ReorderBadly"):
        instrument.run_checked(bad, TwoKernels)


def test_invariants_catch_a_cycle_between_groups():
    with pytest.raises(instrument.InvariantError, match="cycle between groups"):
        instrument._check_groups_acyclic(_use_before_def(TwoKernels), "FuseOps")


def test_the_checker_sees_the_grouping_passes_of_every_strategy():
    mod = random_module(9)
    for name in tvm_fusion_ext.fusion_names():
        checker = instrument.CheckInvariants()
        with tvm.target.Target("llvm"), tvm.transform.PassContext(instruments=[checker]):
            pipelines.fusion_pipeline(name, tvm.target.Target("llvm"))(mod)
        assert checker.checked["FuseTIR"] >= 1, name
        assert name == "none" or sum(checker.checked[p] for p in instrument.GROUPING_PASSES) >= 1


def test_env_var_turns_the_checks_on_in_pipeline(monkeypatch):
    name = "test-drops-a-kernel"
    monkeypatch.setitem(registry._STRATEGIES, name, registry.FusionStrategy(
        name, "drops the first kernel", lambda target: [_pass("FuseOps", _drop_first_kernel)]))
    monkeypatch.delenv(instrument.ENV_VAR, raising=False)
    inputs = verify.random_inputs(TwoKernels["main"])
    wrong = verify.run(verify.build(TwoKernels, name, "llvm"), inputs)  # silently wrong
    assert verify.max_abs_error(wrong, verify.run(verify.build(TwoKernels, "none"), inputs)) > 0
    monkeypatch.setenv(instrument.ENV_VAR, "1")
    with pytest.raises(instrument.InvariantError, match="pass FuseOps changed the ops"):
        verify.build(TwoKernels, name, "llvm")
    assert os.environ[instrument.ENV_VAR] == "1" and instrument.enabled()


def test_structurally_equal_fusions_are_built_once():
    mod = random_module(3)
    result = differential.check_module(mod, ["none", "stock", "dominator-forward"],
                                       targets=[differential.FAST_LLVM])
    assert result.checked == 3 and not result.failures
    fused = [differential.fuse(mod, s, differential.FAST_LLVM) for s in ("stock", "dominator-forward")]
    assert tvm_ffi.structural_equal(*fused)
    assert result.builds == 2

"""Graceful limits: symbolic shapes, unsupported ops, corrupt feedback and spec
files. Every strategy either handles the input or leaves it unfused with a warning; files are
validated when loaded. (The corrupt tuning database is tested with the tuning module.)"""

import json
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax, tirx
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_ext
from tvm_fusion_ext.partitioners.apollo.feedback import FeedbackStore
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.relax_passes.apollo_fusion import ApolloFusion
from tvm_fusion_ext.target_dsa import PRESETS, DSASpec, register_dsa_target
from tvm_fusion_ext.testing import differential, verify

STRATEGIES = tvm_fusion_ext.fusion_names()


# ---- symbolic shapes ------------------------------------------------------------------------------

def _symbolic_batch() -> tvm.IRModule:
    """A small MLP block whose batch dimension ``n`` is symbolic."""
    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 6), "float32"))
    g = relax.Var("g", relax.TensorType((6,), "float32"))
    with bb.function("main", [x, w, g]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.add(x, relax.const(0.5, "float32"))))
            m = bb.emit(relax.op.matmul(a, w))
            s = bb.emit(relax.op.nn.softmax(relax.op.multiply(m, g), axis=-1))
            r = bb.emit(relax.op.sum(s, axis=[1], keepdims=True))
            out = bb.emit_output(relax.op.subtract(s, relax.op.exp(r)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def symbolic():
    mod = _symbolic_batch()
    rng = np.random.default_rng(0)
    cases = []
    for batch in (1, 5):
        inputs = [rng.uniform(-1, 1, shape).astype("float32") for shape in ((batch, 8), (8, 6), (6,))]
        cases.append((inputs, verify.run(verify.build(mod, "none", "llvm", "unscheduled"), inputs)))
    unfused = verify.count_kernels(differential.fuse(mod, "none", "llvm"))
    return mod, cases, unfused


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_symbolic_batch_is_fused_or_left_unfused_with_a_warning(symbolic, strategy):
    mod, cases, unfused = symbolic
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fused = differential.fuse(mod, strategy, differential.FAST_LLVM)  # invariants checked
    warned = [str(w.message) for w in caught if "symbolic" in str(w.message)]
    kernels = verify.count_kernels(fused)
    assert kernels < unfused or warned or strategy == "none", f"{strategy}: unfused without a warning"
    if warned:
        assert kernels == unfused and "static shapes" in warned[0]
    executable = differential.compile_fused(fused, differential.FAST_LLVM)
    for inputs, expected in cases:  # one executable, two batch sizes
        verify.assert_allclose_by_dtype(verify.run(executable, inputs), expected, context=strategy)


def test_symbolic_shapes_on_the_dsa_are_a_clear_error():
    with pytest.raises(ValueError, match="symbolic extent n: the DSA model needs static shapes"):
        verify.build(_symbolic_batch(), "stock", "dsa/stcp920")


# ---- unsupported ops ------------------------------------------------------------------------------

@tvm.register_global_func("tvm_fusion_ext.test.double", override=True)
def _double(x, out):
    out.copyfrom(x.numpy() * 2)


@I.ir_module
class WithPackedCall:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")) -> R.Tensor((4, 8), "float32"):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.exp(a)
            c = R.call_dps_packed("tvm_fusion_ext.test.double", (b,), out_ty=R.Tensor((4, 8), "float32"))
            d = R.add(c, a)
            e = R.tanh(d)
            R.output(e)
        return e


@I.ir_module
class WithUnlegalizedOp:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")) -> R.Tensor((4, 8), "float32"):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.exp(a)
            c = R.ewise_fma(b, b, a)  # no legalization in TVM 0.27
            d = R.add(c, a)
            e = R.tanh(d)
            R.output(e)
        return e


def _top_level_ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


def _ops_in_groups(mod) -> set[str]:
    found = set()
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function) and func.attrs and func.attrs.get("Primitive", 0):
            relax.analysis.post_order_visit(func.body, lambda e: found.add(e.op.name) if isinstance(
                e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return found


@pytest.mark.parametrize("mod, op", [(WithPackedCall, "relax.call_dps_packed"),
                                     (WithUnlegalizedOp, "relax.ewise_fma")], ids=["packed", "unlegalized"])
def test_unsupported_ops_stay_outside_groups(mod, op):
    for strategy in STRATEGIES:
        # the grouping passes' view, before FuseTIR turns groups into kernels
        grouped = differential.fuse(mod, strategy, differential.FAST_LLVM)
        assert _top_level_ops(grouped).count(op) == 1, strategy
        assert op not in _ops_in_groups(grouped), strategy
        assert relax.analysis.check_well_formed(grouped)


def test_packed_call_runs_like_unfused_under_every_strategy():
    result = differential.check_module(WithPackedCall, targets=[differential.FAST_LLVM])
    assert result.checked == len(STRATEGIES)
    assert not result.failures, "\n".join(map(str, result.failures))


# ---- corrupt APOLLO feedback file -----------------------------------------------------------------

GOOD_FEEDBACK = {"version": 1, "failed_patterns": [{"pattern": "p", "reason": "r", "ops": ["add"]}],
                 "rejected_parallel": [{"patterns": ["a", "b"], "gain_s": 0.5}]}


@pytest.mark.parametrize("content, reason", [
    ("{not json", "Expecting property name"),
    (json.dumps({"version": 99}), "unsupported feedback version 99"),
    (json.dumps([1, 2]), "unsupported feedback version None"),
    (json.dumps({"version": 1, "failed_patterns": [{"reason": "no pattern"}]}), r"failed_patterns\[0\]"),
    (json.dumps({"version": 1, "failed_patterns": "p"}), "failed_patterns is not a list"),
    (json.dumps({"version": 1, "rejected_parallel": [{"patterns": ["a"], "gain_s": "big"}]}),
     r"rejected_parallel\[0\]"),
])
def test_corrupt_feedback_file_is_ignored_with_a_warning(tmp_path, content, reason):
    path = tmp_path / "feedback.json"
    path.write_text(content)
    with pytest.warns(UserWarning, match=f"{path}: corrupt APOLLO feedback file ignored .*{reason}"):
        store = FeedbackStore(path)
    assert store.forbidden() == frozenset() and store.rejected_parallel == {}
    store.save()
    assert FeedbackStore(path).failed == {}  # rewritten as a valid (empty) file


def test_valid_feedback_file_loads_without_warning(tmp_path):
    path = tmp_path / "feedback.json"
    path.write_text(json.dumps(GOOD_FEEDBACK))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = FeedbackStore(path)
    assert store.forbidden() == {"p"} and store.rejected_parallel == {("a", "b"): 0.5}


def test_apollo_with_a_corrupt_feedback_file_fuses_as_without_one(tmp_path):
    path = tmp_path / "feedback.json"
    path.write_text("\x00garbage")
    mod = tvm.transform.Sequential(preprocess_passes())(WithPackedCall)
    with tvm.target.Target("llvm"):
        reference = ApolloFusion(("I", "II"))(mod)
        with pytest.warns(UserWarning, match="corrupt APOLLO feedback file"):
            fused = ApolloFusion(("I", "II"), feedback_path=str(path))(mod)
    tvm.ir.assert_structural_equal(fused, reference)
    assert json.loads(path.read_text())["version"] == 1


# ---- corrupt DSA spec file ------------------------------------------------------------------------

def _spec(**changes) -> dict:
    data = PRESETS["stcp920"].to_dict()
    data.update(name="bad-chip", **changes)
    return data


@pytest.mark.parametrize("data, field", [
    ({k: v for k, v in _spec().items() if k != "lb_bytes"}, "missing field 'lb_bytes'"),
    (_spec(lb_size=4096), "unknown field 'lb_size'"),
    (_spec(lb_bytes="64KB"), "field 'lb_bytes' must be a positive integer, got '64KB'"),
    (_spec(clusters=0), "field 'clusters' must be a positive integer"),
    (_spec(launch_cycles=-1), "field 'launch_cycles' must be a non-negative integer"),
    (_spec(units=[]), "field 'units' must be a non-empty list"),
    (_spec(units=[{"name": "v", "kind": "vector"}]), r"field 'units\[0\]': missing field 'ops_per_cycle'"),
    (_spec(units=[{"name": "m", "kind": "matrix", "ops_per_cycle": 8, "matrix_shape": [16, 16]}]),
     r"field 'units\[0\].matrix_shape' must be \[M, N, K\]"),
    (_spec(units=[{"name": "t", "kind": "tensor", "ops_per_cycle": 8}]), "kind 'tensor' not in"),
    ([1, 2, 3], "a spec is a table of fields, not list"),
])
def test_corrupt_spec_file_is_a_value_error_naming_file_and_field(tmp_path, data, field):
    path = tmp_path / "chip.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"^{path}: .*{field}"):
        DSASpec.from_file(path)
    with pytest.raises(ValueError, match=field):
        register_dsa_target("bad-chip", path)


@pytest.mark.parametrize("name, text, message", [
    ("chip.json", '{"name": "x",', "not a valid JSON file"),
    ("chip.toml", "name = ", "not a valid TOML file"),
    ("chip.yaml", "name: x", "spec files are .json or .toml"),
    ("missing.json", None, "cannot read the spec file"),
])
def test_unreadable_spec_file_is_a_value_error(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        DSASpec.from_file(path)


def test_valid_toml_spec_still_loads(tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text('name = "toml-chip"\nclusters = 2\ncores_per_cluster = 2\nlb_bytes = 32768\n'
                    'gb_bytes = 1048576\n[[units]]\nname = "v"\nkind = "vector"\nops_per_cycle = 8\n')
    spec = DSASpec.from_file(path)
    assert (spec.num_cores, spec.lb_bytes, spec.units[0].ops_per_cycle) == (4, 32768, 8)

"""``tvm-fusion export / compile / run``: model files through one strategy into
a ``.so`` whose outputs equal ONNX Runtime's / PyTorch's, IR dumps, tuning records, the DSA
profile, and one-line errors for bad input."""

import json
import os

import numpy as np
import pytest

from tvm_fusion_ext.cli import main

pytestmark = pytest.mark.zoo

APOLLO = ["apollo_fig3", "--model-arg", "batch=4", "--model-arg", "features=64"]
PHASE_FILES = ["00_input.py", "01_preprocess.py", "02_fusion.py", "03_fuse_tir.py", "04_schedule.py",
               "05_lowering.py"]


def _ok(*argv):
    assert main([str(a) for a in argv]) == 0, argv


def _error_line(capsys, *argv, status=2) -> str:
    assert main([str(a) for a in argv]) == status, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _onnx_model(path, nodes, dims, opset=17):
    """A one-input, one-output float ONNX graph ``x -> ... -> y`` written to ``path``."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph(nodes, "g", [x], [y])
    # IR version 8: what the installed ONNX Runtime reads (onnx's default is newer).
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    return path


def _onnxruntime(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture(scope="module")
def apollo(tmp_path_factory):
    """apollo_fig3 exported as ONNX, compiled with the apollo strategy (IR dumped), and run."""
    pytest.importorskip("onnxruntime")
    root = tmp_path_factory.mktemp("apollo")
    model, inputs, library, dump = root / "m.onnx", root / "in.npz", root / "m.so", root / "ir"
    _ok("export", *APOLLO, "--format", "onnx", "-o", model, "--inputs-out", inputs)
    _ok("compile", model, "--target", "llvm", "--fusion", "apollo", "--dump-ir", dump, "-o", library)
    return root


def test_onnx_export_compile_run_equals_onnxruntime(apollo, capsys):
    import tvm
    from tvm import relax

    feeds = dict(np.load(apollo / "in.npz"))
    assert list(feeds) == ["x"] and feeds["x"].shape == (4, 64)
    _ok("run", apollo / "m.so", "--inputs", apollo / "in.npz", "--outputs", apollo / "out.npz", "--profile")
    printed = capsys.readouterr().out
    assert "median latency" in printed and "fused_" in printed          # timing and the kernel table
    outputs = np.load(apollo / "out.npz")
    expected = _onnxruntime(apollo / "m.onnx", feeds)
    assert list(outputs) == [f"output_{i}" for i in range(len(expected))]
    for i, want in enumerate(expected):
        np.testing.assert_allclose(outputs[f"output_{i}"], want, rtol=1e-4, atol=1e-6)
    # The library alone runs with load_module + VirtualMachine.
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(apollo / "m.so")), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(feeds["x"])).numpy(), expected[0],
                               rtol=1e-4, atol=1e-6)
    sidecar = json.loads((apollo / "m.so.json").read_text())
    assert sidecar["inputs"] == [{"name": "x", "shape": [4, 64], "dtype": "float32"}]
    assert (sidecar["fusion"], sidecar["policy"]) == ("apollo", "untuned")
    assert json.loads(sidecar["target"])["kind"] == "llvm"


def test_dump_ir_writes_every_phase(apollo):
    dump = apollo / "ir"
    assert sorted(os.listdir(dump)) == PHASE_FILES
    text = {name: (dump / name).read_text() for name in PHASE_FILES}
    assert "R.nn.log_softmax" in text["00_input.py"] and "R.call_tir" not in text["00_input.py"]
    assert "R.call_tir" in text["01_preprocess.py"] and '"Primitive"' not in text["01_preprocess.py"]
    assert '"Primitive": True' in text["02_fusion.py"]                      # groups, before FuseTIR
    assert '"Primitive"' not in text["03_fuse_tir.py"] and "def fused_" in text["03_fuse_tir.py"]
    assert "tirx.is_scheduled" in text["04_schedule.py"] and "tirx.is_scheduled" not in text["03_fuse_tir.py"]
    assert "vm.builtin" in text["05_lowering.py"]


def test_exported_program_compile_run_equals_pytorch(tmp_path):
    """LLTM: three named inputs, two outputs."""
    torch = pytest.importorskip("torch")
    program, inputs, library = tmp_path / "m.pt2", tmp_path / "in.npz", tmp_path / "m.so"
    _ok("export", "lltm", "--model-arg", "batch=4", "--model-arg", "input_features=16", "--model-arg",
        "state_size=32", "--format", "torch", "-o", program, "--inputs-out", inputs)
    _ok("compile", program, "--target", "llvm", "--fusion", "stock", "-o", library)
    _ok("run", library, "--inputs", inputs, "--outputs", tmp_path / "out.npz", "--runs", 1)
    feeds = dict(np.load(inputs))
    assert list(feeds) == ["x", "h", "cell"]
    module = torch.export.load(str(program)).module()
    with torch.no_grad():
        expected = module(*[torch.from_numpy(feeds[name]) for name in feeds])
    outputs = np.load(tmp_path / "out.npz")
    assert list(outputs) == ["output_0", "output_1"]
    for i, want in enumerate(expected):
        np.testing.assert_allclose(outputs[f"output_{i}"], want.numpy(), rtol=1e-4, atol=1e-6)


def test_dynamic_onnx_needs_and_takes_input_shapes(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from onnx import helper

    model = _onnx_model(tmp_path / "dyn.onnx", [helper.make_node("Relu", ["x"], ["r"]),
                                                helper.make_node("Tanh", ["r"], ["y"])], ["batch", 8])
    err = _error_line(capsys, "compile", model, "--target", "llvm", "--fusion", "stock", "-o", tmp_path / "m.so")
    assert "input 'x' has dynamic dimensions [batch, 8]" in err and "--input-shapes" in err
    err = _error_line(capsys, "compile", model, "--input-shapes", "x:[3,9]", "--target", "llvm", "--fusion",
                      "stock", "-o", tmp_path / "m.so")
    assert "input 'x' has shape [batch, 8], --input-shapes gives [3, 9]" in err
    _ok("compile", model, "--input-shapes", "x:[3,8]", "--target", "llvm", "--fusion", "stock",
        "-o", tmp_path / "m.so")
    x = np.random.default_rng(0).uniform(-1, 1, (3, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    _ok("run", tmp_path / "m.so", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz", "--runs", 1)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], _onnxruntime(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-6)


def test_dynamic_exported_program_binds_symbolic_dims(tmp_path):
    torch = pytest.importorskip("torch")
    from tvm import relax

    from tvm_fusion_ext.driver.evaluation import load_workload

    class AddRelu(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x) + y

    batch = torch.export.Dim("batch")
    program = torch.export.export(AddRelu(), (torch.randn(4, 8), torch.randn(4, 8)),
                                  dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    torch.export.save(program, str(tmp_path / "dyn.pt2"))
    with pytest.raises(ValueError, match=r"input 'x' has dynamic dimensions \[s\d+, 8\]"):
        load_workload(str(tmp_path / "dyn.pt2"))
    with pytest.raises(ValueError, match="binds dimension s\\d+ to both 2 and 3"):
        load_workload(str(tmp_path / "dyn.pt2"), input_shapes={"x": [2, 8], "y": [3, 8]})
    workload = load_workload(str(tmp_path / "dyn.pt2"), input_shapes={"x": [2, 8]})
    assert relax.analysis.check_well_formed(workload.mod)
    assert [[int(d) for d in p.ty.shape.values] for p in workload.mod["main"].params] == [[2, 8], [2, 8]]
    assert [x.shape for x in workload.inputs] == [(2, 8), (2, 8)]
    np.testing.assert_allclose(workload.expected[0], np.maximum(workload.inputs[0], 0) + workload.inputs[1])


def test_parse_input_shapes():
    from tvm_fusion_ext.driver.artifacts import parse_input_shapes

    assert parse_input_shapes(["x:[1,3,224,224]", "y:[2, 4] in:0:[5]"]) == {
        "x": [1, 3, 224, 224], "y": [2, 4], "in:0": [5]}
    for bad in (["x"], ["x:[1,0]"], ["x:[a]"], ["x:[1] x:[2]"]):
        with pytest.raises(ValueError, match="--input-shapes"):
            parse_input_shapes(bad)


def test_dsa_target_run_prints_the_simulated_profile(tmp_path, capsys):
    import tvm

    from tvm_fusion_ext import zoo
    from tvm_fusion_ext.driver import artifacts
    from tvm_fusion_ext.target_dsa import profile

    args = ["apollo_fig3", "--model-arg", "batch=4", "--model-arg", "features=32"]
    _ok("export", *args, "-o", tmp_path / "m.onnx", "--inputs-out", tmp_path / "in.npz")
    _ok("compile", *args, "--target", "dsa/stcp920", "--fusion", "stock", "-o", tmp_path / "d.so")
    capsys.readouterr()
    _ok("run", tmp_path / "d.so", "--inputs", tmp_path / "in.npz", "--profile")
    printed = capsys.readouterr().out
    model = zoo.load("apollo_fig3", {"batch": 4, "features": 32})
    target = tvm.target.Target("dsa/stcp920")
    expected = profile(artifacts.compile_model(model.relax("torch"), "stock", target), model.numpy_inputs(),
                       target)
    assert f"({expected['cycles']} cycles, {expected['kernels']} kernel calls)" in printed
    assert "target dsa/stcp920" in printed and "LB bytes" in printed      # per-kernel table


def _split_record(work_dir, mod, target):
    """A JSON database in ``work_dir`` with one record: the innermost loop of the first block of
    the element-wise kernel split by 16 (what ``tvm-fusion tune`` would store)."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from tvm_fusion_ext.pipelines import fusion_pipeline

    with target:
        fused = fusion_pipeline("stock", target)(mod)
    task = next(t for t in ms.relax_integration.extract_tasks(fused, target) if t.task_name == "fused_add_multiply")
    sch = s_tir.Schedule(task.dispatched[0])
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    sch.split(sch.get_loops(block)[-1], [None, 16])
    os.makedirs(work_dir)
    database = ms.database.JSONDatabase(path_workload=os.path.join(work_dir, "database_workload.json"),
                                        path_tuning_record=os.path.join(work_dir, "database_tuning_record.json"))
    workload = database.commit_workload(task.dispatched[0])
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, [1e-6], target, ms.arg_info.ArgInfo.from_prim_func(task.dispatched[0]["main"])))


def test_tuning_records_are_applied_and_a_corrupt_database_is_skipped(tmp_path, capsys):
    pytest.importorskip("tvm_fusion_ext.tuning")
    import tvm

    from tvm_fusion_ext import zoo
    from tvm_fusion_ext.tuning import tuning_target

    model = zoo.load("apollo_fig3", {"batch": 4, "features": 64})
    records = tmp_path / "records"
    _split_record(str(records), model.relax("torch"), tuning_target(tvm.target.Target("llvm")))
    _ok("compile", *APOLLO, "--target", "llvm", "--fusion", "stock", "--tuning-records", records,
        "--dump-ir", tmp_path / "ir", "-o", tmp_path / "t.so")
    scheduled = (tmp_path / "ir" / "04_schedule.py").read_text()
    kernel = scheduled[scheduled.index("def fused_add_multiply"):]
    assert "ax1_0 * T.int64(16) + ax1_1" in kernel.split("def ", 2)[1]        # the record's split
    assert json.loads((tmp_path / "t.so.json").read_text())["policy"] == "tuned"
    np.savez(tmp_path / "in.npz", x=model.numpy_inputs()[0])
    _ok("run", tmp_path / "t.so", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz", "--runs", 1)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], model.reference_outputs()[0],
                               rtol=1e-4, atol=1e-6)
    capsys.readouterr()

    (records / "database_tuning_record.json").write_text('[0, [["truncated')
    assert main(["compile", *APOLLO, "--target", "llvm", "--fusion", "stock", "--tuning-records",
                 str(records), "-o", str(tmp_path / "u.so")]) == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "warning" in err and "database_tuning_record.json" in err
    assert json.loads((tmp_path / "u.so.json").read_text())["policy"] == "untuned"


# ------------------------------------------------------------------------------------------------
# Bad input: one line on stderr, non-zero exit
# ------------------------------------------------------------------------------------------------
def test_unsupported_onnx_op_is_named(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from onnx import helper

    model = _onnx_model(tmp_path / "celu.onnx", [helper.make_node("Relu", ["x"], ["r"]),
                                                 helper.make_node("Celu", ["r"], ["y"])], [2, 3])
    err = _error_line(capsys, "compile", model, "--target", "llvm", "--fusion", "stock", "-o", tmp_path / "m.so")
    assert "unsupported operator(s): Celu" in err


@pytest.mark.parametrize("argv, message", [
    (["missing.onnx", "--target", "llvm", "--fusion", "stock"], "missing.onnx: no such file"),
    (["missing.pt2", "--target", "llvm", "--fusion", "stock"], "missing.pt2: no such file"),
    (["apollo_fig3", "--target", "nosuchtarget", "--fusion", "stock"], "bad target 'nosuchtarget'"),
    (["apollo_fig3", "--target", '{"kind": "llvm",', "--fusion", "stock"], "bad target '{\"kind\": \"llvm\",'"),
    (["apollo_fig3", "--target", "llvm", "--fusion", "bogus"], "unknown fusion strategy 'bogus'"),
    (["apollo_fig3", "--target", "llvm", "--fusion", "stock", "--policy", "tuned"],
     "--policy tuned and --tuning-records DIR go together"),
    (["apollo_fig3", "--target", "llvm", "--fusion", "stock", "--input-shapes", "x:[1,2]"],
     "--input-shapes applies to model files"),
])
def test_compile_user_errors_are_one_line(argv, message, tmp_path, capsys):
    err = _error_line(capsys, "compile", *argv, "-o", tmp_path / "m.so")
    assert message in err


def test_run_checks_inputs_against_the_sidecar(apollo, tmp_path, capsys):
    library = apollo / "m.so"
    x = np.load(apollo / "in.npz")["x"]
    cases = {"missing": {}, "extra": {"x": x, "mask": x}, "shape": {"x": x[:2]}, "dtype": {"x": x.astype("float64")}}
    for name, arrays in cases.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
    assert "missing input(s) x; the model takes x: float32[4, 64]" in \
        _error_line(capsys, "run", library, "--inputs", tmp_path / "missing.npz")
    assert "unknown input(s) mask" in _error_line(capsys, "run", library, "--inputs", tmp_path / "extra.npz")
    assert "input 'x' is float32[2, 64], the model takes float32[4, 64]" in \
        _error_line(capsys, "run", library, "--inputs", tmp_path / "shape.npz")
    assert "input 'x' is float64[4, 64]" in _error_line(capsys, "run", library, "--inputs", tmp_path / "dtype.npz")
    assert "no such file" in _error_line(capsys, "run", tmp_path / "none.so", "--inputs", apollo / "in.npz")
    (tmp_path / "bare.so").write_bytes((apollo / "m.so").read_bytes())
    assert "no sidecar bare.so.json" in _error_line(capsys, "run", tmp_path / "bare.so", "--inputs", apollo / "in.npz")


def test_export_user_errors_are_one_line(tmp_path, capsys):
    assert "unknown model 'resnet19'" in _error_line(capsys, "export", "resnet19", "-o", tmp_path / "m.onnx")
    assert "give --format onnx|torch" in _error_line(capsys, "export", "apollo_fig3", "-o", tmp_path / "m.bin")
    assert "does not exist" in _error_line(capsys, "export", "apollo_fig3", "-o", tmp_path / "no" / "m.onnx")


def test_tune_takes_input_shapes_for_a_dynamic_model(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    from onnx import helper

    from tvm_fusion_ext import tuning

    model = _onnx_model(tmp_path / "dyn.onnx", [helper.make_node("Relu", ["x"], ["y"])], ["batch", 8])
    argv = ["tune", model, "--fusion", "stock", "--trials", "1", "--work-dir", tmp_path / "t", "--no-progress"]
    err = _error_line(capsys, *argv)
    assert "input 'x' has dynamic dimensions [batch, 8]" in err and "--input-shapes" in err
    tuned = []

    def fake_tune(mod, fusion, target, trials, work_dir, **_kwargs):
        tuned.append([int(d) for d in mod["main"].params[0].ty.shape])
        return tuning.TuneReport(database=None, work_dir=str(work_dir), trials=trials)

    monkeypatch.setattr(tuning, "tune", fake_tune)
    _ok(*argv, "--input-shapes", "x:[3,8]")
    assert tuned == [[3, 8]]
    assert "--input-shapes 'x:[3,8]'" in capsys.readouterr().out   # the compile command it prints


@pytest.mark.parametrize("command", ["compare", "compile", "tune", "explain"])
def test_every_model_command_takes_the_model_positional_or_as_model(command):
    """``compare --model M`` and ``compile M`` are the documented forms; each command takes both."""
    from tvm_fusion_ext.cli import build_parser
    from tvm_fusion_ext.cli.options import resolve_model

    required = {"compile": ["--target", "llvm", "--fusion", "stock", "-o", "x.so"],
                "tune": ["--target", "llvm", "--fusion", "stock", "--trials", "8", "--work-dir", "w"],
                "explain": ["--fusion", "stock", "--out", "x.svg"]}.get(command, [])
    for form in (["softmax_chain"], ["--model", "softmax_chain"]):
        args = build_parser().parse_args([command, *form, *required])
        resolve_model(args)
        assert args.model == "softmax_chain"


def test_a_missing_or_doubled_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as missing:
        main(["compile", "--target", "llvm", "--fusion", "stock", "-o", "x.so"])
    assert missing.value.code == 2 and "a model is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as doubled:
        main(["compile", "a", "--model", "b", "--target", "llvm", "--fusion", "stock", "-o", "x.so"])
    assert doubled.value.code == 2 and "two models given" in capsys.readouterr().err

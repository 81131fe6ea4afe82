"""Every zoo model compiles and runs under ``none`` and ``stock`` through both import paths and
matches PyTorch eager (max error < 1e-4 relative to the output's magnitude), at small shapes."""

import subprocess
import sys

import numpy as np
import pytest
import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.testing import verify

pytestmark = pytest.mark.zoo

# Small shapes keep the whole file a few minutes on 2 cores; full shapes run in scripts/bench_zoo.py.
SMALL = zoo.SMALL_ARGS
REL_TOL = 1e-4


def _preprocessed(mod):
    """The pre-processing every strategy shares, run once for both strategies of a test.

    Each strategy's pipeline runs it again (a no-op then); FoldConstant compiles every constant
    sub-expression (BatchNorm statistics), which dominates compile time of BN-heavy models.
    """
    target = tvm.target.Target("llvm")
    with target:
        return tvm.transform.Sequential(preprocess_passes())(mod)


def test_small_shapes_cover_every_model():
    assert set(SMALL) == set(zoo.model_names())


@pytest.mark.parametrize("importer", zoo.IMPORTERS)
@pytest.mark.parametrize("name", zoo.model_names())
def test_model_matches_pytorch(name, importer):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    model = zoo.load(name, SMALL[name])
    expected = model.reference_outputs()
    mod = _preprocessed(model.relax(importer))
    for fusion in ("none", "stock"):
        actual = verify.run(verify.build(mod, fusion), model.numpy_inputs())
        error = verify.max_rel_error(actual, expected)
        assert error < REL_TOL, f"{name} via {importer}, fusion {fusion}: relative error {error:.2e}"


@pytest.mark.parametrize("name", ["bert_base", "vit", "dlrm", "wide_deep"])
def test_model_matches_pytorch_under_graphturbo_on_the_dsa(name):
    """GraphTurbo's DSA kernels (layer form, weight promotion, gathers read in place) on the zoo's
    transformer and recommendation models; every model and both targets: scripts/check_zoo.py."""
    pytest.importorskip("torch")
    model = zoo.load(name, SMALL[name])
    mod = _preprocessed(model.relax("torch"))
    actual = verify.run(verify.build(mod, "graphturbo", "dsa/stcp920"), model.numpy_inputs())
    error = verify.max_rel_error(actual, model.reference_outputs())
    assert error < REL_TOL, f"{name} under graphturbo on dsa/stcp920: relative error {error:.2e}"


def test_load_is_deterministic_with_nontrivial_batch_norm():
    torch = pytest.importorskip("torch")
    first, second = zoo.load("resnet_stage", SMALL["resnet_stage"]), zoo.load("resnet_stage", SMALL["resnet_stage"])
    for a, b in zip(first.module.state_dict().values(), second.module.state_dict().values()):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(first.inputs, second.inputs))
    norms = [m for m in first.module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not first.module.training
    for norm in norms:
        assert norm.running_mean.abs().max() > 0 and not torch.allclose(norm.running_var, torch.ones(1))
    other = zoo.load("resnet_stage", SMALL["resnet_stage"], seed=1)
    assert not np.array_equal(other.numpy_inputs()[0], first.numpy_inputs()[0])


def test_model_args_are_typed_and_checked():
    assert zoo.parse_model_args("bert_base", ["layers=2", "seq=64"]) == {
        **zoo.get_spec("bert_base").defaults, "layers": 2, "seq": 64}
    with pytest.raises(ValueError, match="has no argument 'depth'"):
        zoo.parse_model_args("bert_base", ["depth=2"])
    with pytest.raises(ValueError, match="expected int"):
        zoo.parse_model_args("resnet18", ["image=big"])
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        zoo.parse_model_args("resnet18", ["image"])
    with pytest.raises(ValueError, match="unknown model"):
        zoo.get_spec("resnet19")


def test_zoo_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['onnx'] = None\n"
            "import tvm_fusion_ext\nfrom tvm_fusion_ext import zoo\n"
            "assert 'resnet50' in zoo.model_names(); print(zoo.parse_model_args('vit', ['depth=1'])['depth'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1"


def test_input_names_are_the_forward_parameters_in_every_import_path():
    """``export --inputs-out`` keys the inputs by these names and ``compile`` of the zoo name
    names them the same, so ``run`` takes the exported inputs for either build."""
    import inspect

    from tvm_fusion_ext import zoo

    for name in zoo.model_names():
        args = {**zoo.get_spec(name).defaults, **zoo.SMALL_ARGS.get(name, {})}
        model = zoo.load(name, args)
        assert model.input_names == list(inspect.signature(model.module.forward).parameters), name

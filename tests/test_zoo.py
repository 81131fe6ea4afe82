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
SMALL = {
    "resnet18": {"image": 32}, "resnet50": {"image": 32, "layers": "1,1,1,1"},
    "mobilenet_v2": {"image": 32}, "densenet121": {"image": 32, "blocks": "2,2,2,2"},
    "shufflenet_v2": {"image": 32},
    "vit": {"image": 32, "patch": 8, "depth": 1, "num_classes": 10},
    "bert_base": {"seq": 16, "layers": 1}, "conformer": {"seq": 16, "dim": 64, "kernel": 7},
    "dlrm": {"batch": 4, "vocab": 50}, "wide_deep": {"batch": 4, "vocab": 50},
    "lltm": {"batch": 4}, "mi_lstm": {"batch": 4, "input_size": 32, "hidden_size": 64},
    "apollo_fig3": {"batch": 4, "features": 64}, "layernorm_chain": {"seq": 16, "hidden": 64},
    "softmax_chain": {"heads": 2, "seq": 16}, "multi_head": {"batch": 4, "features": 64},
    "multi_tail": {"batch": 4, "features": 64}, "capsule_conv": {"channels": 8, "image": 16},
    "resnet_stage": {"channels": 16, "image": 16},
}
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

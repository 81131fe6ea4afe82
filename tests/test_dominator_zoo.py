"""Dominator fusion on zoo models: forward is stock FuseOps, every direction matches PyTorch."""

import pytest
import tvm
from tvm import relax

from tvm_fusion_ext.pipelines import lowering_passes, preprocess_passes
from tvm_fusion_ext.relax_passes.fuse_ops_dominator import FuseOpsDominator
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype, kernel_traffic, run

pytestmark = pytest.mark.zoo
pytest.importorskip("torch")

# Small shapes: the fusion decisions do not depend on them, compile and import time do.
MODELS = {
    "resnet18": {"image": 16, "num_classes": 10},
    "mobilenet_v2": {"image": 32, "num_classes": 10},
    "bert_base": {"layers": 1, "seq": 16, "hidden": 64, "heads": 2, "intermediate": 128},
}
DIRECTIONS = ("forward", "backward", "both")


def _fuse(mod, fusion):
    return relax.transform.DeadCodeElimination()(relax.transform.FuseTIR()(fusion(mod)))


@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_model(name):
    from tvm_fusion_ext import zoo

    model = zoo.load(name, MODELS[name])
    mod = tvm.transform.Sequential(preprocess_passes())(model.relax("torch"))
    fused = {d: _fuse(mod, FuseOpsDominator(direction=d)) for d in DIRECTIONS}

    # Forward is FuseOps: the same module after FuseTIR.
    tvm.ir.assert_structural_equal(fused["forward"], _fuse(mod, relax.transform.FuseOps()))
    kernels = {d: kernel_traffic(f).kernels for d, f in fused.items()}
    assert kernels["both"] <= kernels["forward"], kernels

    # Every direction compiles (FuseTIR'd groups, TVM's lowering) and computes what PyTorch does.
    target = tvm.target.Target("llvm")
    expected = model.reference_outputs()
    for direction in ("backward", "both"):  # forward is FuseOps' module, checked structurally above
        fused_mod = fused[direction]
        with target:
            executable = tvm.compile(fused_mod, target,
                                     relax_pipeline=tvm.transform.Sequential(lowering_passes(target)))
        actual = run(executable, model.numpy_inputs())
        assert_allclose_by_dtype(actual, expected, context=f"{name} {direction}")

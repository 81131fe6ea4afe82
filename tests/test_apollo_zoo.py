"""APOLLO on zoo models at small shapes: fewer kernels than stock FuseOps, same numbers as PyTorch.

BERT's encoder layer is the paper's main workload (at most 0.7x stock's kernels); ResNet
checks the conv epilogue (conv + batch norm + relu + residual in one kernel); the paper's own
sub-graphs (Fig. 3, Fig. 5, Fig. 6) check that each layer of the ablation removes kernels.
"""

import pytest
import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import fusion_pipeline, preprocess_passes
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype, build, kernel_traffic, run

pytestmark = pytest.mark.zoo
pytest.importorskip("torch")

TARGET = tvm.target.Target("llvm")
ABLATION = ("apollo-no-stitch", "apollo-no-parallel", "apollo")


def _load(name, args):
    model = zoo.load(name, args)
    with TARGET:
        mod = tvm.transform.Sequential(preprocess_passes())(model.relax("torch"))
    return model, mod


def _kernels(mod, fusion):
    with TARGET:
        return kernel_traffic(fusion_pipeline(fusion, TARGET)(mod)).kernels


def _matches_pytorch(model, mod, fusion="apollo"):
    actual = run(build(mod, fusion), model.numpy_inputs())
    assert_allclose_by_dtype(actual, model.reference_outputs(), context=f"{model} {fusion}")


@pytest.mark.parametrize("name, args, ratio", [
    ("bert_base", {"layers": 1, "seq": 16, "hidden": 64, "heads": 2, "intermediate": 128}, 0.7),
    # two BasicBlocks, the first down-sampling: every conv kernel takes its batch norm, relu and
    # residual add (FuseOps does the same, so no fewer kernels)
    ("resnet_stage", {"channels": 8, "image": 8, "blocks": 2}, 1.0),
])
def test_no_more_kernels_than_stock_and_matches_pytorch(name, args, ratio):
    model, mod = _load(name, args)
    stock, apollo = _kernels(mod, "stock"), _kernels(mod, "apollo")
    assert apollo <= ratio * stock, (apollo, stock)
    _matches_pytorch(model, mod)


# Layer II stitches each case's reductions with their neighbours, except in multi_tail (no
# reduction, and stock already makes it one kernel) and multi_head, where it moves the mean's
# reduction into the branches' kernel and leaves its division apart: as many kernels as Layer I,
# which keeps the mean whole (its pieces closed again). Exact counts also depend on which groups
# the default schedule's loop fusion accepts (upward feedback splits the others).
@pytest.mark.parametrize("name, args, layer2_stitches", [
    ("apollo_fig3", {"batch": 4, "features": 64}, True),  # Fig. 3(c), then rule 7
    ("layernorm_chain", {"seq": 16, "hidden": 64}, True),
    ("softmax_chain", {"heads": 2, "seq": 16}, True),
    ("multi_head", {"batch": 4, "features": 64}, False),
    ("multi_tail", {"batch": 4, "features": 64}, False),
])
def test_paper_cases_ablation(name, args, layer2_stitches):
    model, mod = _load(name, args)
    stock = _kernels(mod, "stock")
    layer1, layer2, layer3 = (_kernels(mod, fusion) for fusion in ABLATION)
    assert layer1 >= layer2 >= layer3 and layer3 <= stock, (stock, layer1, layer2, layer3)
    assert (layer2 < layer1) == layer2_stitches
    _matches_pytorch(model, mod)

"""The neoflow strategy is registered and compiles modules end to end with unchanged results."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_ext
from tvm_fusion_ext.pipelines import fusion_names, fusion_pipeline, get_strategy
from tvm_fusion_ext.testing.verify import assert_same_as_unfused, kernel_traffic


@I.ir_module
class Block:  # two linear layers sharing x, a redundant x * 1, and an element-wise tail
    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w1: R.Tensor((16, 32), "float32"),
             w2: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            a = R.matmul(R.multiply(x, R.const(1.0, "float32")), w1)
            b = R.matmul(x, w2)
            c = R.add(R.nn.relu(a), R.sigmoid(b))
            R.output(c)
        return c


def test_registered():
    assert "neoflow" in fusion_names()
    strategy = get_strategy("neoflow")
    assert strategy.high_level_preprocess is not None and "simplification" in strategy.description
    assert tvm.get_global_func("tvm_fusion_ext.NeoFlowFusion") is not None
    assert "tvm_fusion_ext.neoflow" in tvm.relax.pipeline.PIPELINE_MAP


def test_end_to_end():
    with tvm.target.Target("llvm"):  # Eq. (4) as written; the cost check is tests/test_cost_check.py's
        fused = fusion_pipeline("neoflow", cost_check=False)(Block)
    assert kernel_traffic(fused).kernels == 1  # one matmul (parallel fusion) + its epilogue
    assert_same_as_unfused(Block, "neoflow")
    assert tvm_fusion_ext.pipeline("neoflow", "llvm") is not None

"""ParallelFusion (NeoFlow section 4.3): matmuls and conv2ds sharing an input become one operator."""

import numpy as np
import tvm
from cases.foundation import TwoMatmuls
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.pipelines import fusion_pipeline
from tvm_fusion_ext.relax_passes.parallel_fusion import ParallelFusion
from tvm_fusion_ext.testing.verify import assert_same_as_unfused, build, kernel_traffic, random_inputs, run


@I.ir_module
class TwoMatmulsExpected:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8, 16), "float32"),
             w2: R.Tensor((8, 6), "float32")):
        with R.dataflow():
            lv = R.concat((w1, w2), axis=1)
            lv1 = R.matmul(x, lv)
            a = R.strided_slice(lv1, axes=[1], begin=[0], end=[16])
            b = R.strided_slice(lv1, axes=[1], begin=[16], end=[22])
            c = R.nn.relu(a)
            d = R.sigmoid(b)
            R.output(c, d)
        return (c, d)


@I.ir_module
class SharedRhs:  # x1 @ w and x2 @ w: rows concatenated
    @R.function
    def main(x1: R.Tensor((3, 8), "float32"), x2: R.Tensor((5, 8), "float32"),
             w: R.Tensor((8, 4), "float32")):
        with R.dataflow():
            a = R.matmul(x1, w)
            b = R.matmul(x2, w)
            R.output(a, b)
        return (a, b)


@I.ir_module
class Dependent:  # rejected: b depends on a, so they are not parallel
    @R.function
    def main(x: R.Tensor((8, 8), "float32"), w1: R.Tensor((8, 8), "float32")):
        with R.dataflow():
            a = R.matmul(x, w1)
            b = R.matmul(x, a)
            R.output(b)
        return b


@I.ir_module
class ThreeConvs:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w1: R.Tensor((4, 3, 3, 3), "float32"),
             w2: R.Tensor((2, 3, 3, 3), "float32"), w3: R.Tensor((4, 3, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            b = R.nn.conv2d(x, w2, padding=[1, 1, 1, 1])
            c = R.nn.conv2d(x, w3, padding=[1, 1, 1, 1])
            d = R.add(a, c)
            e = R.nn.relu(b)
            R.output(d, e)
        return (d, e)


@I.ir_module
class ConvsOtherStride:  # rejected: different strides give different output shapes
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w1: R.Tensor((4, 3, 3, 3), "float32"),
             w2: R.Tensor((4, 3, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            b = R.nn.conv2d(x, w2, strides=[2, 2], padding=[1, 1, 1, 1])
            R.output(a, b)
        return (a, b)


def _ops(mod, name):
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) and e.op.name == name else None)
    return len(found)


def _same_outputs(before, after):
    inputs = random_inputs(before["main"])
    expected = run(build(before, "none", policy="unscheduled"), inputs)
    actual = run(build(after, "none", policy="unscheduled"), inputs)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_two_matmuls_sharing_lhs():
    pf = ParallelFusion()
    after = pf(TwoMatmuls)
    tvm.ir.assert_structural_equal(after, TwoMatmulsExpected)
    assert (pf.fused_groups, pf.fused_ops) == (1, 2)
    _same_outputs(TwoMatmuls, after)


def test_two_matmuls_sharing_rhs():
    after = ParallelFusion()(SharedRhs)
    assert _ops(after, "relax.matmul") == 1
    assert _ops(after, "relax.concat") == 1
    _same_outputs(SharedRhs, after)


def test_dependent_matmuls_rejected():
    pf = ParallelFusion()
    tvm.ir.assert_structural_equal(pf(Dependent), Dependent)
    assert pf.fused_groups == 0


def test_three_conv2d_sharing_input():
    pf = ParallelFusion()
    after = pf(ThreeConvs)
    assert _ops(after, "relax.nn.conv2d") == 1 and pf.fused_ops == 3
    _same_outputs(ThreeConvs, after)


def test_mismatched_conv_shapes_rejected():
    pf = ParallelFusion()
    tvm.ir.assert_structural_equal(pf(ConvsOtherStride), ConvsOtherStride)


def _capsule(capsules=8, channels=4, image=8):
    """NeoFlow 7.4's capsule convolution as written in frameworks: conv2d + bias per capsule, concat."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, image, image), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = []
            for _ in range(capsules):
                w = relax.const(rng.standard_normal((channels, channels, 3, 3)).astype("float32"))
                b = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32"))
                conv = bb.emit(relax.op.nn.conv2d(x, w, strides=2, padding=1))
                outs.append(bb.emit(relax.op.add(conv, b)))
            out = bb.emit_output(relax.op.concat(outs, axis=1))
        bb.emit_func_output(out)
    return bb.get()


def test_capsule_conv_becomes_one_kernel():
    mod = _capsule()
    with tvm.target.Target("llvm"):
        stock = fusion_pipeline("stock")(mod)
        neoflow = fusion_pipeline("neoflow")(mod)
    assert kernel_traffic(stock).kernels == 9  # 8 conv2d(+bias) kernels and the concat
    assert kernel_traffic(neoflow).kernels == 1
    assert_same_as_unfused(mod, "neoflow")

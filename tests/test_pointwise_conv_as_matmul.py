"""PointwiseConvAsMatmul (``tvm_fusion_ext/relax_passes/pointwise_conv_as_matmul.py``): a 1x1 NCHW
conv whose register tile would be transposed becomes a matmul over the flattened image, with its
element-wise epilogue moved onto the flat output; other convs, and reshapes that cannot sink,
stay as they are; every strategy computes what the unfused module computes.

The specs are fixed (AVX-512 and AVX2, 2 cores, 1 MiB / 512 KiB of L2), so the decisions do not
depend on the machine running the tests."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.driver.build import build
from tvm_fusion_ext.driver.evaluation import parse_target
from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.relax_passes import PointwiseConvAsMatmul
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype, run

AVX512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024, vector_registers=32)
AVX2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024)
RNG = np.random.default_rng(7)
W1 = (RNG.standard_normal((32, 8, 1, 1)) * 0.5).astype("float32")
B1 = RNG.standard_normal((1, 32, 1, 1)).astype("float32")


def _rewrite(mod, spec=AVX512):
    rewrite = PointwiseConvAsMatmul(tvm.target.Target("llvm"), spec)
    out = rewrite(mod)
    assert relax.analysis.check_well_formed(out)
    return out, rewrite.rewritten


def test_a_pointwise_conv_and_its_epilogue_become_a_flat_matmul():
    """conv 1x1 (8 -> 32 channels) -> bias -> residual add -> relu over a 24 x 24 image on AVX-512
    (24 columns are no whole vector; 576 pixels are 36): the matmul reads a view of the image, the
    bias is folded to one value per channel, the residual is viewed flat, and one reshape restores
    the image after the relu."""
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 24, 24), "float32"), res: R.Tensor((1, 32, 24, 24), "float32")):
            with R.dataflow():
                y = R.nn.conv2d(x, R.const(W1))
                z = R.add(y, R.const(B1))
                s = R.add(z, res)
                out = R.nn.relu(s)
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 24, 24), "float32"), res: R.Tensor((1, 32, 24, 24), "float32")):
            with R.dataflow():
                flat = R.reshape(x, R.shape([1, 8, 576]))
                y = R.matmul(R.const(W1.reshape(32, 8)), flat, out_dtype="float32")
                z = R.add(y, R.const(B1.reshape(1, 32, 1)))
                res_flat = R.reshape(res, R.shape([1, 32, 576]))
                s = R.add(z, res_flat)
                relu = R.nn.relu(s)
                out = R.reshape(relu, R.shape([1, 32, 24, 24]))
                R.output(out)
            return out

    after, rewritten = _rewrite(Before)
    assert rewritten == 1
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize("conv", [
    {"strides": 2},                                      # a stride-2 1x1 conv reads every other pixel
    {"padding": 1},                                      # padding makes it no matmul
    {"data_layout": "NHWC", "kernel_layout": "OHWI"},    # channels-last is a matmul already
])
def test_convs_that_are_no_flat_matmul_stay(conv):
    bb = relax.BlockBuilder()
    nhwc = conv.get("data_layout") == "NHWC"
    x = relax.Var("x", relax.TensorType((1, 24, 24, 8) if nhwc else (1, 8, 24, 24), "float32"))
    weight = relax.const((W1.transpose(0, 2, 3, 1) if nhwc else W1).copy())
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, weight, **conv))
        bb.emit_func_output(out)
    after, rewritten = _rewrite(bb.get())
    assert rewritten == 0
    tvm.ir.assert_structural_equal(after, bb.get())


def test_a_conv_whose_rows_fill_vectors_of_a_flat_map_that_does_not_stays():
    """14 x 14 = 196 columns hold no whole AVX-512 vector either way: the matmul's tile is no better
    than the conv's, so it stays a conv; 56 x 56 becomes a matmul on AVX-512 and on AVX2."""
    def conv_module(side, channels=(64, 256)):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, channels[0], side, side), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                w = relax.const(np.ones((channels[1], channels[0], 1, 1), "float32"))
                out = bb.emit_output(relax.op.nn.conv2d(x, w))
            bb.emit_func_output(out)
        return bb.get()

    assert _rewrite(conv_module(14))[1] == 0
    assert _rewrite(conv_module(56))[1] == 1
    assert _rewrite(conv_module(56), AVX2)[1] == 1


def test_a_reshape_stops_at_an_op_that_is_not_element_wise_or_a_row_broadcast():
    """The pooled output and an operand broadcast along rows (``[1, 1, 24, 1]``) need the image's
    shape: the reshape stays above them."""
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 24, 24), "float32"), rows: R.Tensor((1, 1, 24, 1), "float32")):
            with R.dataflow():
                y = R.nn.conv2d(x, R.const(W1))
                z = R.multiply(y, rows)
                out = R.nn.max_pool2d(z, pool_size=[2, 2], strides=[2, 2])
                R.output(out)
            return out

    after, rewritten = _rewrite(Before)
    assert rewritten == 1
    calls = [b.value.op.name for b in after["main"].body.blocks[0].bindings]
    assert calls == ["relax.reshape", "relax.matmul", "relax.reshape", "relax.multiply", "relax.nn.max_pool2d"]


@pytest.mark.parametrize("fusion", ["stock", "apollo", "neoflow", "graphturbo", "dominator-both"])
def test_every_strategy_computes_the_bottleneck_block_as_the_unfused_module(fusion):
    """A ResNet bottleneck at 56 x 56 (1x1 -> 3x3 -> 1x1 convs, residual add) compiled for this
    host: whatever the pass decides here, every strategy matches the unfused module."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 56, 56), "float32"))

    def conv(data, cin, cout, k):
        w = relax.const((RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype("float32"))
        b = relax.const(RNG.standard_normal((1, cout, 1, 1)).astype("float32"))
        return bb.emit(relax.op.add(bb.emit(relax.op.nn.conv2d(data, w, padding=k // 2)), b))

    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(conv(x, 64, 32, 1)))
            h = bb.emit(relax.op.nn.relu(conv(h, 32, 32, 3)))
            h = conv(h, 32, 64, 1)
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(h, x))))
        bb.emit_func_output(out)
    mod = bb.get()
    inputs = [RNG.standard_normal((1, 64, 56, 56)).astype("float32")]
    expected = run(build(mod, "none", "llvm", "unscheduled"), inputs)
    assert_allclose_by_dtype(run(build(mod, fusion, parse_target("llvm")), inputs), expected, context=fusion)


def test_a_variable_bound_to_a_conv_is_no_conv_to_rewrite():
    """The pattern matches ``out = y`` for ``y = conv2d(..)`` too (patterns see through bindings);
    only the call is rewritten, and the alias reads its result (a fuzzed graph crashed here)."""
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 24, 24), "float32")):
            with R.dataflow():
                y = R.nn.conv2d(x, R.const(W1))
                strided = R.nn.conv2d(x, R.const(W1), strides=[2, 2])
                out = y
                alias = strided
                R.output(out, alias)
            return (out, alias)

    after, rewritten = _rewrite(Before)
    assert rewritten == 1
    ops = [b.value.op.name for b in after["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert ops == ["relax.reshape", "relax.matmul", "relax.reshape", "relax.nn.conv2d"]

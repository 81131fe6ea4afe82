"""driver.kernel_times: the contractions of a module, their work and their class, read off the
TIR before scheduling (what ``scripts/bench_cpu.py`` divides kernel times by)."""

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.driver.kernel_times import contractions


def _legalized(build) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 10, 10), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return relax.transform.LegalizeOps()(bb.get())


def _weight(*shape):
    return relax.const(np.ones(shape, "float32"))


def test_each_class_and_its_flops():
    def build(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, _weight(16, 8, 3, 3), padding=1))             # 3x3
        b = bb.emit(relax.op.nn.conv2d(a, _weight(16, 16, 1, 1)))                        # 1x1
        c = bb.emit(relax.op.nn.conv2d(b, _weight(16, 1, 5, 5), padding=2, groups=16))  # depthwise
        flat = bb.emit(relax.op.reshape(c, (16, 100)))
        return relax.op.matmul(flat, _weight(100, 4))
    found = contractions(_legalized(build))
    kinds = sorted(kind for _, kind in found.values())
    assert kinds == ["1x1 conv", "3x3 conv", "depthwise conv", "matmul"]
    flops = {kind: work for work, kind in found.values()}
    assert flops["3x3 conv"] == 2 * 16 * 10 * 10 * 8 * 9
    assert flops["1x1 conv"] == 2 * 16 * 10 * 10 * 16
    assert flops["depthwise conv"] == 2 * 16 * 10 * 10 * 25
    assert flops["matmul"] == 2 * 16 * 4 * 100


def test_each_class_in_channels_last():
    """The same classes for NHWC / HWIO convs (``relax_passes.ChannelsLast``), whose reductions
    put the input channels last."""
    def build(bb, x):
        nhwc = {"data_layout": "NHWC", "kernel_layout": "HWIO"}
        y = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
        a = bb.emit(relax.op.nn.conv2d(y, _weight(3, 3, 8, 16), padding=1, **nhwc))
        b = bb.emit(relax.op.nn.conv2d(a, _weight(1, 1, 16, 16), **nhwc))
        return relax.op.nn.conv2d(b, _weight(5, 5, 1, 16), padding=2, groups=16, **nhwc)
    found = contractions(_legalized(build))
    assert sorted(kind for _, kind in found.values()) == ["1x1 conv", "3x3 conv", "depthwise conv"]
    flops = {kind: work for work, kind in found.values()}
    assert flops["depthwise conv"] == 2 * 16 * 10 * 10 * 25

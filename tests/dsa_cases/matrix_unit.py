"""Relax modules and the host check the matrix-unit tests share (test_dsa_matrix_conv.py,
test_dsa_partial_tiles.py)."""

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.target_dsa import profile
from tvm_fusion_ext.testing.verify import run

TARGET = "dsa/stcp920"


def conv_relu(shape, oc: int, kernel: int, stride: int = 1, dilation: int = 1) -> tvm.IRModule:
    """``relu(conv2d(x, w))`` over an NCHW input of ``shape``, padded to keep the map size."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    w = relax.Var("w", relax.TensorType((oc, shape[1], kernel, kernel), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w, strides=stride, dilation=dilation,
                                                             padding=kernel // 2 * dilation)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def shortcut_conv(shape=(2, 64, 56, 56), oc: int = 128) -> tvm.IRModule:
    """A residual block's strided 1x1 shortcut conv with its bias and the residual add (an
    Xception block's), one kernel under FuseOps."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    w = relax.Var("w", relax.TensorType((oc, shape[1], 1, 1), "float32"))
    b = relax.Var("b", relax.TensorType((1, oc, 1, 1), "float32"))
    r = relax.Var("r", relax.TensorType((shape[0], oc, shape[2] // 2, shape[3] // 2), "float32"))
    with bb.function("main", [x, w, b, r]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.add(relax.op.nn.conv2d(x, w, strides=2), b), r))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def unit_busy_matching_llvm(mod: tvm.IRModule, fusion: str, seed: int = 0) -> dict:
    """Compile ``mod`` through ``fusion`` for :data:`TARGET`, assert that it computes what ``llvm``
    does on random inputs, and return the simulated busy cycles per unit."""
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1, 1, [int(d) for d in p.ty.shape]).astype("float32")
              for p in mod["main"].params]
    expected = run(tvm.compile(mod, target="llvm"), inputs)[0]
    ex = tvm.compile(mod, target=tvm.target.Target(TARGET), relax_pipeline=f"tvm_fusion_ext.{fusion}")
    np.testing.assert_allclose(run(ex, inputs)[0], expected, rtol=1e-4, atol=1e-4)
    return profile(ex, inputs, TARGET)["unit_busy"]

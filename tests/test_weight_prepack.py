"""Weights packed at compile time: the default schedule packs a layout-free weight in a
``layout_rewrite_preproc`` block, SplitLayoutRewritePreproc moves it out of the kernel and
FoldConstant runs it, so the kernel reads a packed constant and has no packing loop."""

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

import tvm_fusion_ext
from tvm_fusion_ext.pipelines import schedule_passes
from tvm_fusion_ext.tir_passes.loop_fusion import LAYOUT_REWRITE_PREPROC

TARGET = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})   # 8 float32 lanes


def _conv_relu(weight):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 32, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(weight), padding=1)))
        bb.emit_func_output(out)
    return bb.get()


def _scheduled(mod):
    with TARGET:
        fused = tvm_fusion_ext.fusion_pipeline("stock", TARGET)(mod)
        return tvm.transform.Sequential(schedule_passes(TARGET, "untuned"))(fused)


def _constant_args(mod):
    found = []
    tvm_ffi.structural_walk(mod["main"].body, [(tvm.ir.GenericConst, found.append)])
    return found


def test_conv_weight_is_a_packed_constant_and_the_kernel_has_no_packing_loop():
    weight = np.random.default_rng(0).standard_normal((64, 32, 3, 3)).astype("float32")
    out = _scheduled(_conv_relu(weight))
    kernels = {gv.name_hint: f for gv, f in out.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    (name,) = kernels                                                  # the packing function is gone
    assert name.endswith("_prepacked") and LAYOUT_REWRITE_PREPROC not in kernels[name].script()
    (packed,) = _constant_args(out)
    assert packed.value.shape != weight.shape and packed.value.numpy().size == weight.size
    # [F, C, R, S] -> [F / w, C, R, S, w]: output channels in micro-kernel widths, innermost
    width = packed.value.shape[-1]
    np.testing.assert_array_equal(packed.value.numpy()[0, :, :, :, 1], weight[1])
    assert packed.value.shape == (64 // width, 32, 3, 3, width)


def test_prepacked_conv_computes_the_same_numbers():
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((64, 32, 3, 3)).astype("float32")
    x = rng.standard_normal((1, 32, 14, 14)).astype("float32")
    mod = _conv_relu(weight)
    expected = relax.VirtualMachine(tvm.compile(mod, "llvm", relax_pipeline=tvm_fusion_ext.pipeline("none", "llvm",
                                                                                                      policy="unscheduled")),
                                    tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ex = tvm.compile(mod, TARGET, relax_pipeline=tvm_fusion_ext.pipeline("stock", TARGET))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _matmul_bias(weight, rows=32):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, weight.shape[0]), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(relax.op.matmul(x, relax.const(weight)), relax.const(1.0, "float32")))
        bb.emit_func_output(out)
    return bb.get()


def test_matmul_weight_is_packed_into_micro_kernel_panels():
    """A ``[K, N]`` weight is contiguous along the vector loop, but one micro-kernel's ``K x w``
    panel is strided by ``N``: it is packed at compile time to ``[N / w, K, w]`` (GotoBLAS's
    packed B), and the kernel reads it with no packing loop; the numbers stay the same."""
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((64, 192)).astype("float32")
    mod = _matmul_bias(weight)
    out = _scheduled(mod)
    kernels = {gv.name_hint: f for gv, f in out.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    (name,) = kernels
    assert name.endswith("_prepacked") and LAYOUT_REWRITE_PREPROC not in kernels[name].script()
    (packed,) = [c for c in _constant_args(out) if c.value.numpy().size == weight.size]
    width = packed.value.shape[-1]
    assert packed.value.shape == (192 // width, 64, width) and width < 192
    np.testing.assert_array_equal(packed.value.numpy()[1, :, 2], weight[:, width + 2])
    x = rng.standard_normal((32, 64)).astype("float32")
    ex = tvm.compile(mod, TARGET, relax_pipeline=tvm_fusion_ext.pipeline("stock", TARGET))
    result = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(result, x @ weight + 1.0, rtol=1e-4, atol=1e-4)


def test_repeated_layers_build_their_weight_packing_once():
    """Two layers of the same shape share their kernel and its packing function: FoldWeightLayouts
    builds it once and folds both weights with it, and the model computes the same numbers."""
    from tvm_fusion_ext.relax_passes import FoldWeightLayouts

    rng = np.random.default_rng(3)
    w1, w2 = (rng.standard_normal((64, 64)).astype("float32") for _ in range(2))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.matmul(x, relax.const(w1))))
            out = bb.emit_output(relax.op.nn.relu(relax.op.matmul(h, relax.const(w2))))
        bb.emit_func_output(out)
    with TARGET:
        fused = tvm_fusion_ext.fusion_pipeline("stock", TARGET)(bb.get())
        # layout-free weights, the default schedule, SplitLayoutRewritePreproc
        split = tvm.transform.Sequential(schedule_passes(TARGET, "untuned")[:3])(fused)
    folding = FoldWeightLayouts(TARGET)
    folded = folding(split)
    assert folding.folded == 2 and folding.built == 1
    packed = sorted((c.value.numpy() for c in _constant_args(folded)), key=lambda a: float(a.sum()))
    width = packed[0].shape[-1]
    for weight in (w1, w2):
        expected = weight.reshape(64, 64 // width, width).transpose(1, 0, 2)
        assert any(np.array_equal(p, expected) for p in packed)
    xv = rng.standard_normal((16, 64)).astype("float32")
    ex = tvm.compile(bb.get(), TARGET, relax_pipeline=tvm_fusion_ext.pipeline("stock", TARGET))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    np.testing.assert_allclose(got, np.maximum(np.maximum(xv @ w1, 0) @ w2, 0), rtol=1e-4, atol=1e-4)

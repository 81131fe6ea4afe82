"""Buffer stitching of a padding into the depthwise convolution reading it (GraphTurbo section
4.2, Fig. 10; ``target_dsa/instance_staging.py``: ``_windowed_runs``, ``stage_layers``), on
MobileNetV2's expansion layer and stride-2 depthwise layer."""

import tvm
from dsa_cases.matrix_unit import TARGET, unit_busy_matching_llvm
from tvm import relax

import tvm_fusion_ext  # noqa: F401  (registers the strategies and the DSA target)
from tvm_fusion_ext.driver.static_profile import static_profile
from tvm_fusion_ext.target_dsa.instance_staging import windows_only
from tvm_fusion_ext.tir_passes.analysis import sblocks


def _expand_depthwise(n: int, c: int, expand: int, hw: int) -> tvm.IRModule:
    """``clip(dwconv3x3_s2(clip(conv1x1(x) + b1)) + b2)``: an inverted residual block's expansion
    and depthwise layers with their (folded) batch norms and ReLU6, weights as parameters."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, hw, hw), "float32"))
    w1 = relax.Var("w1", relax.TensorType((expand, c, 1, 1), "float32"))
    b1 = relax.Var("b1", relax.TensorType((1, expand, 1, 1), "float32"))
    w2 = relax.Var("w2", relax.TensorType((expand, 1, 3, 3), "float32"))
    b2 = relax.Var("b2", relax.TensorType((1, expand, 1, 1), "float32"))
    with bb.function("main", [x, w1, b1, w2, b2]):
        with bb.dataflow():
            y = bb.emit(relax.op.clip(relax.op.add(relax.op.nn.conv2d(x, w1), b1), 0.0, 6.0))
            y = bb.emit(relax.op.nn.conv2d(y, w2, strides=2, padding=1, groups=expand))
            y = bb.emit(relax.op.clip(relax.op.add(y, b2), 0.0, 6.0))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _padded_conv_blocks(groups: int) -> tuple:
    """The padding and convolution blocks of a legalized 3x3 conv of 8 channels in ``groups``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8 // groups, 3, 3), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, w, padding=1, groups=groups))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    func = next(f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    named = {b.name_hint: b for b in sblocks(func)}
    return named["pad_temp"], next(b for name, b in named.items() if "conv2d" in name)


def test_windows_only_tells_a_depthwise_conv_from_a_contraction():
    """A depthwise conv reads its padded input along windows of its own channel; a dense conv
    contracts the input channels (a reduction variable alone indexes them)."""
    pad, depthwise = _padded_conv_blocks(groups=8)
    assert windows_only(depthwise, pad)
    assert not windows_only(pad, pad)  # not a reduction
    pad, dense = _padded_conv_blocks(groups=1)
    assert not windows_only(dense, pad)


def test_a_padded_depthwise_input_too_large_for_gb_stays_in_lb_bands():
    """Per image the expansion's output (96 x 112 x 112, 4.8 MB) and its padded copy (5 MB)
    exceed the 8 MB GB together: staged layer by layer, the expansion's output went to DDR. The
    padding (with the expansion's bias and ReLU6) now runs in the depthwise conv's tiles, a few
    channels at a time in LB, and GB is allocated once the layers are tiled, so only the
    expansion's output takes GB: one kernel whose only DDR traffic is its input, output and
    weights, computing what ``llvm`` does."""
    mod = _expand_depthwise(2, 16, 96, 112)
    profile = static_profile(mod, "graphturbo", TARGET)
    assert profile["kernels"] == 1
    assert profile["buffers"]["ddr"] == 1
    activations = 2 * 16 * 112 * 112 * 4 + 2 * 96 * 56 * 56 * 4
    assert profile["ddr_bytes"] < 1.05 * activations
    busy = unit_busy_matching_llvm(mod, "graphturbo")
    assert busy["mme"] > 0 and busy["vme"] > 0

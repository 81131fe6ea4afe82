"""Two-contraction chains for the contraction-chain schedule's tests and benchmark.

* :func:`mlp_module` - a transformer MLP: matmul (up-projection) + bias + GELU, matmul
  (down-projection) + bias + residual (BERT, ViT);
* :func:`dw_pw_module` - an inverted-residual tail: 3x3 depthwise conv + bias + ReLU6, 1x1
  projection conv + bias (+ residual when the channel counts agree) (MobileNetV2, EfficientNet);
* :func:`pw_dw_module` - an inverted-residual head: 1x1 expansion conv + bias + ReLU6, 3x3
  depthwise conv (stride 1 or 2, zero padding) + bias + ReLU6;
* :func:`chain_pipeline` - the package's pipeline with the whole ``main`` as one group (the chain
  kernel) or with TVM's ``FuseOps`` groups (each contraction with its epilogue: the parts);
  :func:`chain_kernel` - that one group's kernel, unscheduled.

Weights are constants, as in the zoo's models, so the schedule may pack them at compile time.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, tirx

from ..pipelines import lowering_passes, preprocess_passes, schedule_passes
from ..relax_passes.materialize_partition import MaterializePartition


def _const(rng, shape, scale: float = 1.0):
    return relax.const((rng.standard_normal(shape) * scale).astype("float32"))


def mlp_module(tokens: int, hidden: int, ratio: int = 4, seed: int = 0) -> tvm.IRModule:
    """``x + gelu(x @ w1 + b1) @ w2 + b2`` for ``x`` of ``tokens x hidden``."""
    rng = np.random.default_rng(seed)
    inner = ratio * hidden
    x = relax.Var("x", relax.TensorType((tokens, hidden), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            up = bb.emit(relax.op.matmul(x, _const(rng, (hidden, inner), hidden ** -0.5)))
            up = bb.emit(relax.op.add(up, _const(rng, (inner,))))
            act = bb.emit(relax.op.nn.gelu(up))
            down = bb.emit(relax.op.matmul(act, _const(rng, (inner, hidden), inner ** -0.5)))
            down = bb.emit(relax.op.add(down, _const(rng, (hidden,))))
            out = bb.emit_output(relax.op.add(down, x))
        bb.emit_func_output(out)
    return bb.get()


def dw_pw_module(channels: int, image: int, out_channels: int, seed: int = 0, layout: str = "NCHW") -> tvm.IRModule:
    """``conv1x1(relu6(dwconv3x3(x) + b1)) + b2`` (``+ x`` when ``out_channels == channels``)
    for ``x`` of ``1 x channels x image x image`` (``layout`` NCHW, OIHW weights) or of
    ``1 x image x image x channels`` (NHWC, HWIO weights, as ``ChannelsLast`` leaves a network)."""
    rng = np.random.default_rng(seed)
    conv, per_channel, x = _conv_builder(rng, layout, channels, image)
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            dw = bb.emit(conv(x, channels, 1, 3, padding=1, groups=channels))
            dw = bb.emit(relax.op.add(dw, _const(rng, per_channel(channels))))
            act = bb.emit(relax.op.clip(dw, 0.0, 6.0))
            pw = bb.emit(conv(act, out_channels, channels, 1))
            out = relax.op.add(pw, _const(rng, per_channel(out_channels)))
            if out_channels == channels:
                out = relax.op.add(bb.emit(out), x)
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def pw_dw_module(channels: int, image: int, expanded: int, stride: int = 1, seed: int = 0,
                 layout: str = "NCHW", batch: int = 1, window: int = 3) -> tvm.IRModule:
    """``relu6(dwconv(relu6(conv1x1(x) + b1), stride) + b2)`` for ``x`` of ``batch x channels x
    image x image`` expanded to ``expanded`` channels, the depthwise conv ``window x window`` with
    ``window // 2`` padding (``layout`` as for :func:`dw_pw_module`)."""
    rng = np.random.default_rng(seed)
    conv, per_channel, x = _conv_builder(rng, layout, channels, image, batch)
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            pw = bb.emit(conv(x, expanded, channels, 1))
            pw = bb.emit(relax.op.add(pw, _const(rng, per_channel(expanded))))
            act = bb.emit(relax.op.clip(pw, 0.0, 6.0))
            dw = bb.emit(conv(act, expanded, 1, window, padding=window // 2, groups=expanded, strides=stride))
            dw = bb.emit(relax.op.add(dw, _const(rng, per_channel(expanded))))
            out = bb.emit_output(relax.op.clip(dw, 0.0, 6.0))
        bb.emit_func_output(out)
    return bb.get()


def _conv_builder(rng, layout: str, channels: int, image: int, batch: int = 1):
    """``(conv, per_channel, x)``: a conv2d emitter with random constant weights in ``layout``
    (OIHW or HWIO), the shape of a per-channel constant, and the input variable (``batch``
    images)."""
    nhwc = layout == "NHWC"

    def per_channel(count):
        return (1, 1, 1, count) if nhwc else (1, count, 1, 1)

    def conv(data, out, group_in, window, **attrs):
        shape = (window, window, group_in, out) if nhwc else (out, group_in, window, window)
        weight = _const(rng, shape, (group_in * window * window) ** -0.5 if window == 1 else 1 / 3)
        return relax.op.nn.conv2d(data, weight, data_layout=layout, kernel_layout="HWIO" if nhwc else "OIHW",
                                  **attrs)

    x = relax.Var("x", relax.TensorType((batch, image, image, channels) if nhwc else (batch, channels, image, image),
                                        "float32"))
    return conv, per_channel, x


def _one_group(graph):
    return [[node.index for node in graph.nodes]]


def fusion_passes(fused: bool) -> list:
    """Pre-processing, then ``main`` as one group (``fused``) or ``FuseOps``'s groups, and ``FuseTIR``."""
    fusion = MaterializePartition(_one_group) if fused else relax.transform.FuseOps()
    return [*preprocess_passes(), fusion, relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
            s_tir.transform.StmtSimplify()]


def chain_pipeline(target: tvm.target.Target, fused: bool, policy: str = "untuned") -> tvm.transform.Pass:
    """The package's pipeline for ``target`` with ``main`` as one kernel (``fused``) or with
    ``FuseOps``'s groups (one kernel per contraction and its epilogue)."""
    return tvm.transform.Sequential([*fusion_passes(fused), *schedule_passes(target, policy),
                                     *lowering_passes(target)])


def chain_kernel(mod: tvm.IRModule, target: tvm.target.Target) -> tirx.PrimFunc:
    """``main`` of ``mod`` as the one unscheduled kernel the schedule receives (weights marked
    layout-free, as the CPU backend marks them before scheduling)."""
    with target:
        fused = tvm.transform.Sequential([*fusion_passes(True),
                                          relax.transform.AttachAttrLayoutFreeBuffers()])(mod)
    (kernel,) = [f for _, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]
    return kernel

"""ChannelsLast (relax_passes/channels_last.py): depthwise-separable networks in NHWC on CPUs, others
left as they are with a reason; and the channels-last global pool it creates, vectorised along
channels (tir_passes/vectorize.py: vectorize_column_reduction)."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fusion_ext.backends.cpu import CPUBackend
from tvm_fusion_ext.driver.build import build, max_rel_error, run
from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.relax_passes import ChannelsLast
from tvm_fusion_ext.tir_passes import AnchorLoopFusion

RNG = np.random.default_rng(0)


def _const(*shape):
    return relax.const(RNG.uniform(-0.5, 0.5, shape).astype("float32"))


def _separable_block(shuffle: bool = False, depthwise: bool = True) -> tvm.IRModule:
    """pointwise conv + ReLU6 -> 3x3 stride-2 depthwise conv + ReLU6 -> (channel shuffle) ->
    global average pool -> flatten -> linear: MobileNet's block and head."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, _const(16, 8, 1, 1)))
            y = bb.emit(relax.op.clip(relax.op.add(y, _const(1, 16, 1, 1)), 0.0, 6.0))
            y = bb.emit(relax.op.nn.conv2d(y, _const(16, 1 if depthwise else 16, 3, 3), strides=2, padding=1,
                                           groups=16 if depthwise else 1))
            y = bb.emit(relax.op.clip(y, 0.0, 6.0))
            if shuffle:
                y = bb.emit(relax.op.reshape(relax.op.permute_dims(relax.op.reshape(y, (1, 2, 8, 8, 8)),
                                                                   [0, 2, 1, 3, 4]), (1, 16, 8, 8)))
            y = bb.emit(relax.op.reshape(relax.op.mean(y, axis=[2, 3], keepdims=True), (1, 16)))
            out = bb.emit_output(relax.op.matmul(y, _const(16, 10)))
        bb.emit_func_output(out)
    return bb.get()


def _calls(mod, name):
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call) and getattr(e.op, "name", "") == name
        else None)
    return found


def test_depthwise_network_is_converted_with_transposes_only_at_its_boundary():
    mod = _separable_block()
    converted = ChannelsLast()(mod)
    assert relax.analysis.check_well_formed(converted)
    convs = _calls(converted, "relax.nn.conv2d")
    assert [(c.attrs.data_layout, c.attrs.kernel_layout) for c in convs] == [("NHWC", "HWIO")] * 2
    assert not _calls(converted, "relax.clip")  # ReLU6 as maximum / minimum: no layout break
    # The input enters NHWC once and leaves it once, before the head's reshape; weights are
    # transposed constants, not transposes run by a kernel.
    transposes = _calls(converted, "relax.permute_dims")
    assert len(transposes) == 2 and all(not isinstance(t.args[0], tvm.ir.Constant) for t in transposes)


def test_depthwise_network_computes_the_same_in_nhwc():
    mod = _separable_block()
    x = RNG.uniform(-1, 1, (1, 8, 16, 16)).astype("float32")
    target = tvm.target.Target("llvm")
    assert ChannelsLast in [p.__class__ for p in CPUBackend().graph_passes(target)]
    expected = run(build(mod, "none", target, policy="unscheduled"), [x])
    for fusion in ("stock", "apollo"):
        actual = run(build(mod, fusion, target), [x])
        assert max_rel_error(actual, expected) < 1e-5, fusion


def test_networks_the_layout_would_not_help_are_left_with_a_reason():
    dense = ChannelsLast()
    mod = _separable_block(depthwise=False)
    assert dense(mod).same_as(mod) and "no depthwise" in dense.reason
    shuffled = ChannelsLast()
    mod = _separable_block(shuffle=True)
    assert shuffled(mod).same_as(mod) and "transposes" in shuffled.reason
    forced = ChannelsLast(force=True)(_separable_block(depthwise=False))  # for ablations
    assert [c.attrs.data_layout for c in _calls(forced, "relax.nn.conv2d")] == ["NHWC"] * 2


def test_channels_last_global_pool_is_vectorised_along_channels():
    """``mean`` over H and W of an NHWC map: the channel loop moves inside the reduction loops
    and is vectorised (before, the reduction walked each channel with a stride of a whole row)."""
    avx2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024, vector_registers=16,
                   l1_bytes=32 * 1024, l2_bytes=512 * 1024)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 14, 14, 480), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.mean(x, axis=[1, 2], keepdims=True))
        bb.emit_func_output(y)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
        relax.transform.LegalizeOps()(bb.get()))))
    func = next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    sch = AnchorLoopFusion(avx2).apply(func, tvm.target.Target("llvm"), False)
    loops = [sch.get(rv) for rv in sch.get_loops(sch.get_sblock("x_red"))]
    assert loops[-1].kind == tvm.tirx.ForKind.VECTORIZED
    assert [int(loop.extent) for loop in loops[-4:-2]] == [14, 14]  # reduced loops outside the channels
    scheduled = sch.mod["main"].with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target="llvm")
    data = RNG.uniform(-1, 1, (1, 14, 14, 480)).astype("float32")
    out = tvm.runtime.empty((1, 1, 1, 480), "float32")
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_allclose(out.numpy(), data.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)


def _onnx_separable_block() -> tvm.IRModule:
    """The separable block as an ONNX graph (opset 13: ``Clip`` takes its bounds as inputs),
    imported by TVM's ONNX frontend, which lowers ``Clip`` to ``call_tir`` of max / min."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from tvm_fusion_ext.zoo.frontends import relax_from_onnx

    def init(name, *shape):
        return numpy_helper.from_array(RNG.uniform(-0.5, 0.5, shape).astype("float32"), name)

    low, high = (numpy_helper.from_array(np.array(v, "float32"), n) for n, v in (("low", 0.0), ("high", 6.0)))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Clip", ["c1", "low", "high"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c2", "low", "high"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "separable", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [init("w1", 16, 8, 1, 1), init("b1", 16), init("w2", 16, 1, 3, 3), init("w3", 16, 10), low, high])
    return relax_from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def test_onnx_clip_is_carried_in_nhwc():
    """TVM's ONNX frontend emits ``Clip`` as ``call_tir`` of ``topi.maximum`` / ``minimum`` with
    ``where(isnan(bound))`` bounds: the pass turns them back into Relax ops, so the network runs
    in NHWC with a transpose only at its boundary, and computes the same."""
    mod = _onnx_separable_block()
    layout = ChannelsLast()
    converted = layout(mod)
    assert layout.reason == "" and relax.analysis.check_well_formed(converted)
    assert [c.attrs.data_layout for c in _calls(converted, "relax.nn.conv2d")] == ["NHWC"] * 2
    assert len(_calls(converted, "relax.maximum")) == 2 and len(_calls(converted, "relax.minimum")) == 2
    assert len(_calls(converted, "relax.permute_dims")) == 2
    x = RNG.uniform(-1, 1, (1, 8, 16, 16)).astype("float32")
    target = tvm.target.Target("llvm")
    expected = run(build(mod, "none", target, policy="unscheduled"), [x])
    assert max_rel_error(run(build(mod, "stock", target), [x]), expected) < 1e-5


def test_a_call_tir_that_is_not_topi_maximum_is_left_alone():
    """Only a callee structurally equal to ``emit_te(topi.maximum / minimum)`` becomes a Relax op:
    ``topi.add`` with a constant scalar keeps its ``call_tir``."""
    from tvm import topi

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, _const(4, 1, 3, 3), padding=1, groups=4))
            y = bb.emit_te(topi.add, y, relax.const(np.float32(1.5)))
            y = bb.emit_te(topi.maximum, y, relax.const(np.float32(0.0)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    converted = ChannelsLast(force=True)(bb.get())  # the add has no layout rule: forced through
    assert len(_calls(converted, "relax.maximum")) == 1
    assert len(_calls(converted, "relax.call_tir")) == 1  # the add, in NCHW between transposes

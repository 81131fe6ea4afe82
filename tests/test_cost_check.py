"""The profitability check every strategy consults (tvm_fusion_ext.cost) and its calibration cache.

The fused kernels here are predicted slower than their parts under the default schedule:

* ``ExpMatmul``: an element-wise ``exp`` prologue fused into a matmul is inlined into the
  matmul's operand load, so ``exp`` runs once per multiply-add (N times too often) - APOLLO's
  Layer I, GraphTurbo's straight merge and backward dominator fusion all make this group;
* ``TwoMatmuls``: two matmuls sharing an input, multiplied together - NeoFlow's greedy Eq. (4)
  merges everything into one kernel, where only one matmul gets a register tile;
* ``SplitExpMatmul``: ``ExpMatmul`` whose ``exp`` reads an item of a ``split`` made outside the
  group (the gates of an LSTM cell feeding the next step's matmul);
* ``ShuffleConv``: ShuffleNetV2's channel shuffle (concatenate, reshape, transpose, reshape) in
  front of a 1x1 conv - NeoFlow's Eq. (4) and GraphTurbo's straight merge make one kernel of it,
  whose conv reads its channels through a permuted index; the register tile still blocks the
  channel loop inside its micro-kernels, and that kernel is predicted (and measured) faster than
  its parts.

Decisions are asserted under the suite's fixed rates (tests/conftest.py); the calibration-cache
tests use their own temporary cache directory and an injected calibration.
"""

import dataclasses
import json
import math
import time
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_fusion_ext.analysis.graph import NodeKind, OpPattern, build_graphs
from tvm_fusion_ext.cli import main as cli_main
from tvm_fusion_ext.cost import (
    KernelCostModel,
    ProfitabilityCheck,
    Rates,
    calibration,
    fused_kernel,
    profitability_for,
)
from tvm_fusion_ext.cost import model as cost_model
from tvm_fusion_ext.cost.features import kernel_features
from tvm_fusion_ext.cost.model import RememberedPredictions
from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.hardware import spec as hardware_spec
from tvm_fusion_ext.hardware.device_costs import CACHE_ENV
from tvm_fusion_ext.pipelines import fusion_pipeline, preprocess_passes
from tvm_fusion_ext.relax_passes.apollo_fusion import ApolloFusion, apollo_preprocess
from tvm_fusion_ext.testing import verify

TARGET = tvm.target.Target("llvm")
_rng = np.random.default_rng(0)
W1 = _rng.standard_normal((256, 512)).astype("float32") * 0.05
W2 = _rng.standard_normal((256, 512)).astype("float32") * 0.05
BIAS = _rng.standard_normal((512,)).astype("float32")
W_SHUFFLE = (_rng.standard_normal((256, 464, 1, 1)) * 0.05).astype("float32")
W_DEPTHWISE = (_rng.standard_normal((64, 1, 3, 3)) * 0.1).astype("float32")
BIAS_CONV = _rng.standard_normal((1, 64, 1, 1)).astype("float32")
W_EXCITE = (_rng.standard_normal((64, 64, 1, 1)) * 0.1).astype("float32")


@I.ir_module
class ExpMatmul:
    @R.function
    def main(x: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            e = R.exp(x)
            y = R.matmul(e, R.const(W1))
            R.output(y)
        return y


@I.ir_module
class TwoMatmuls:
    @R.function
    def main(x: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            a = R.matmul(x, R.const(W1))
            b = R.matmul(x, R.const(W2))
            c = R.multiply(a, b)
            d = R.add(c, R.const(1.0, "float32"))
            R.output(d)
        return d


@I.ir_module
class SplitExpMatmul:
    @R.function
    def main(x: R.Tensor((64, 512), "float32")):
        with R.dataflow():
            halves = R.split(x, 2, axis=1)
            e = R.exp(halves[1])
            y = R.matmul(e, R.const(W1))
            s = R.add(halves[0], R.const(1.0, "float32"))
            R.output(y, s)
        return (y, s)


@I.ir_module
class ShuffleConv:
    @R.function
    def main(a: R.Tensor((2, 232, 7, 7), "float32"), b: R.Tensor((2, 232, 7, 7), "float32")):
        with R.dataflow():
            c = R.concat((a, b), axis=1)
            r = R.reshape(c, (2, 2, 232, 7, 7))
            t = R.permute_dims(r, (0, 2, 1, 3, 4))
            s = R.reshape(t, (2, 464, 7, 7))
            y = R.nn.conv2d(s, R.const(W_SHUFFLE))
            R.output(y)
        return y


@I.ir_module
class MatmulBiasRelu:
    @R.function
    def main(x: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            y = R.matmul(x, R.const(W1))
            z = R.nn.relu(R.add(y, R.const(BIAS)))
            R.output(z)
        return z


@I.ir_module
class ConvSiluSqueeze:
    """An MBConv block's middle: depthwise conv, bias, SiLU, then squeeze-excite (mean, 1x1 conv,
    sigmoid) scaling the map."""

    @R.function
    def main(x: R.Tensor((1, 64, 28, 28), "float32")):
        with R.dataflow():
            y = R.add(R.nn.conv2d(x, R.const(W_DEPTHWISE), padding=(1, 1), groups=64), R.const(BIAS_CONV))
            a = R.multiply(y, R.sigmoid(y))
            m = R.mean(a, axis=[2, 3], keepdims=True)
            out = R.multiply(a, R.sigmoid(R.nn.conv2d(m, R.const(W_EXCITE))))
            R.output(out)
        return out


def _graph(mod):
    with TARGET:
        return build_graphs(tvm.transform.Sequential(preprocess_passes())(mod))[0]


def _kernels(mod, strategy: str, cost_check: bool) -> int:
    with TARGET:
        return verify.count_kernels(fusion_pipeline(strategy, TARGET, cost_check)(mod))


# ---- the check itself ---------------------------------------------------------------------------
def test_recomputing_prologue_is_predicted_slower_and_an_epilogue_faster():
    check = profitability_for(TARGET)
    graph = _graph(ExpMatmul)
    verdict = check.verdict(graph, [[0], [1]])
    assert not verdict.profitable and verdict.fused_s > 2 * verdict.parts_s, verdict.describe()
    # exp sits inside the matmul's reduction loop of the fused kernel: N times its own work
    fused_ops = sum(ops for nest in kernel_features(cost_model.scheduled(fused_kernel(graph, [0, 1]),
                                                                         TARGET))
                    for ops in nest.ops.values())
    assert fused_ops > 5 * 64 * 256 * 512

    graph = _graph(MatmulBiasRelu)
    fusible = [n.index for n in graph.nodes if n.fusible]
    fused, parts = check.group_seconds(graph, fusible), sum(check.group_seconds(graph, [n]) for n in fusible)
    assert fused < parts, (fused, parts)
    # a contraction with its element-wise epilogue is what FuseOps forms: the check abstains
    verdict = check.verdict(graph, [[n] for n in fusible])
    assert verdict.profitable and verdict.fused_s is None, verdict.describe()


def _ops_by_class(kernel) -> dict:
    ops = {}
    for nest in kernel_features(cost_model.scheduled(kernel, TARGET)):
        for (kind, _), count in nest.ops.items():
            ops[kind] = ops.get(kind, 0.0) + count
    return ops


def test_a_reduction_loop_enclosing_the_tile_is_not_a_register_tile():
    """With the reduction loop moved outside the row loop, every multiply-add loads and stores its
    accumulator: ``vector`` work, not ``tiled`` (the loops in their first order are)."""
    inside = _one_row_tile.with_attr("global_symbol", "main")
    sch = s_tir.Schedule(inside)
    i, k, _ = sch.get_loops(sch.get_sblock("update"))
    sch.reorder(k, i)
    around, inside = _ops_by_class(sch.mod["main"]), _ops_by_class(inside)
    macs = 64 * 64 * 16
    assert around.get("tiled", 0) == 0 and around["vector"] >= 2 * macs, around
    assert inside.get("tiled", 0) >= 2 * macs, inside


def test_a_shuffled_conv_input_keeps_the_register_tile():
    """The channel shuffle inlined into the conv reads its channels through ``c % 2 * 232 + c //
    2``, an index that takes one value per channel step: the reduction block counts the channels
    it runs over, not the whole 464, so the channel loop stays inside the micro-kernels (counted
    whole, it enclosed the tile: 1.5x slower on ShuffleNetV2 at 112)."""
    graph = _graph(ShuffleConv)
    macs = 2 * 256 * 49 * 464
    fused = _ops_by_class(fused_kernel(graph, [n.index for n in graph.nodes if n.fusible]))
    assert fused.get("tiled", 0) >= 2 * macs, fused


@T.prim_func(s_tir=True)
def _one_row_tile(a: T.Buffer((64, 64), "float32"), b: T.Buffer((64, 16), "float32"),
                  c: T.Buffer((64, 16), "float32")):
    # one row of 16 lanes: two vector accumulators under the reduction loop
    for i, k in T.grid(64, 64):
        for j in T.vectorized(16):
            with T.sblock("update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    c[vi, vj] = T.float32(0)
                c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


@T.prim_func(s_tir=True)
def _four_row_tile(a: T.Buffer((64, 64), "float32"), b: T.Buffer((64, 16), "float32"),
                   c: T.Buffer((64, 16), "float32")):
    # four unrolled rows of 16 lanes: eight vector accumulators
    for i0, k in T.grid(16, 64):
        for i1 in T.unroll(4):
            for j in T.vectorized(16):
                with T.sblock("update"):
                    vi = T.axis.spatial(64, i0 * 4 + i1)
                    vj, vk = T.axis.remap("SR", [j, k])
                    with T.init():
                        c[vi, vj] = T.float32(0)
                    c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


def test_a_tile_with_too_few_accumulators_counts_its_fma_latency():
    """An FMA pipeline of 2 units x 4 cycles needs 8 independent vector accumulators: one row of
    two AVX2 vectors waits 4x as long per multiply-add as four rows of two."""
    avx2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024)

    def tiled(func, spec):
        return sum(n.ops.get(("tiled", False), 0.0) for n in kernel_features(func, spec))

    assert tiled(_one_row_tile, None) == tiled(_four_row_tile, None) == 2 * 64 * 64 * 16
    assert tiled(_four_row_tile, avx2) == 2 * 64 * 64 * 16
    assert tiled(_one_row_tile, avx2) == 4 * tiled(_four_row_tile, avx2)


@T.prim_func(s_tir=True)
def _depthwise_tile(a: T.Buffer((66, 16), "float32"), w: T.Buffer((3, 16), "float32"),
                    c: T.Buffer((64, 16), "float32")):
    # a 3-tap depthwise filter: four unrolled rows of 16 lanes, each reading its own input vector
    for i0, k in T.grid(16, 3):
        for i1 in T.unroll(4):
            for j in T.vectorized(16):
                with T.sblock("update"):
                    vi = T.axis.spatial(64, i0 * 4 + i1)
                    vj, vk = T.axis.remap("SR", [j, k])
                    with T.init():
                        c[vi, vj] = T.float32(0)
                    c[vi, vj] = c[vi, vj] + a[vi + vk, vj] * w[vk, vj]


def test_a_tile_reading_an_operand_per_accumulator_counts_a_load_per_fma():
    """A matmul tile broadcasts a row of ``a`` and reuses a vector of ``b`` across rows; a
    depthwise tile reads its input at another address for every accumulator, so each FMA waits
    on its own load and the tile issues one FMA per cycle (``fma_units`` times the cost)."""
    avx512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024, vector_registers=32)

    def tiled(func, spec):
        return sum(n.ops.get(("tiled", False), 0.0) for n in kernel_features(func, spec))

    latency = avx512.fma_units * avx512.fma_latency / 4  # four accumulators of the eight needed
    assert tiled(_four_row_tile, avx512) == latency * tiled(_four_row_tile, None)
    assert tiled(_depthwise_tile, avx512) == latency * avx512.fma_units * tiled(_depthwise_tile, None)


@T.prim_func(s_tir=True)
def _relu_4_wide(a: T.Buffer((64, 4), "float32"), b: T.Buffer((64, 4), "float32")):
    for i in range(64):
        for j in T.vectorized(4):
            with T.sblock("relu"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = T.max(a[vi, vj], T.float32(0))


def test_a_loop_that_fills_part_of_a_vector_counts_whole_vectors():
    """A 4-wide vectorised loop uses a quarter of each AVX-512 register and half of each AVX2 one:
    its operations count 4x and 2x (a 4-lane micro-kernel of a conv over 116 channels on AVX-512
    was predicted at full-vector speed, 4x too fast)."""
    avx2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024)
    avx512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024, vector_registers=32)

    def vector_ops(func, spec):
        return sum(n.ops.get(("vector", False), 0.0) for n in kernel_features(func, spec))

    assert vector_ops(_relu_4_wide, None) == 64 * 4
    assert vector_ops(_relu_4_wide, avx2) == 2 * 64 * 4
    assert vector_ops(_relu_4_wide, avx512) == 4 * 64 * 4
    # whole vectors: the 16-lane tile is one AVX-512 vector per row, two AVX2 ones
    tiled = [sum(n.ops.get(("tiled", False), 0.0) for n in kernel_features(_four_row_tile, spec))
             for spec in (avx2, avx512)]
    assert tiled == [2 * 64 * 64 * 16, 2 * 64 * 64 * 16 * 8 / 4]


def test_a_lone_kernel_is_predicted_as_the_pipeline_leaves_it(monkeypatch):
    """The ``fuse_tir`` phase simplifies every kernel, a lone one too: a 1x1 conv's unit window
    iterators become constants (``x[.., yy + ry]`` -> ``x[.., yy]``), which lets the schedule pad
    it; the kernel the check predicts is that one, not the legalized PrimFunc. (The conv is kept
    a conv: on an AVX-512 host ``PointwiseConvAsMatmul`` would make it a matmul.)"""
    from tvm_fusion_ext.relax_passes import pointwise_conv_as_matmul

    monkeypatch.setattr(pointwise_conv_as_matmul, "matmul_is_cheaper", lambda *args: False)
    weight = relax.const(_rng.standard_normal((58, 58, 1, 1)).astype("float32"))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 58, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, weight))
        bb.emit_func_output(out)
    graph = _graph(bb.get())
    with TARGET:
        piped = relax.transform.AttachAttrLayoutFreeBuffers()(fusion_pipeline("none", TARGET)(bb.get()))
    (expected,) = [f for _, f in piped.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    tvm.ir.assert_structural_equal(fused_kernel(graph, [graph.nodes[-1].index]), expected)


def test_an_item_of_a_tuple_made_outside_the_group_is_predicted():
    """``FuseTIR`` takes no tuple parameter: the item is the group's parameter, as
    ``MaterializePartition`` makes it. Without that, the group of the item and ``exp`` made no
    kernel, was predicted infinitely slow, and every merge with it looked profitable."""
    graph = _graph(SplitExpMatmul)
    matmul = next(n for n in graph.nodes if n.pattern == OpPattern.OUT_EWISE_FUSABLE)
    exp = graph.nodes[matmul.inputs[0]]
    item = graph.nodes[exp.inputs[0]]
    assert item.kind is NodeKind.TUPLE_GET_ITEM
    assert fused_kernel(graph, [item.index, exp.index]) is not None
    verdict = profitability_for(TARGET).verdict(graph, [[item.index, exp.index], [matmul.index]])
    assert math.isfinite(verdict.parts_s) and not verdict.profitable, verdict.describe()
    # split, exp, matmul and add: dominator-both's backward merge of exp into the matmul is refused
    assert _kernels(SplitExpMatmul, "dominator-both", cost_check=False) == 3
    assert _kernels(SplitExpMatmul, "dominator-both", cost_check=True) == 4


def test_a_reshape_that_becomes_a_view_costs_nothing_apart():
    """A reshape kernel whose result stays in the block becomes a view (``RewriteDataflowReshape``),
    so a merge that takes it into a matmul's kernel saves no time: its parts are the matmul alone.
    A reshape the function returns stays a copy kernel and is predicted as one."""
    @I.ir_module
    class ReshapeMatmulReshape:
        @R.function
        def main(x: R.Tensor((8, 32, 256), "float32")):
            with R.dataflow():
                rows = R.reshape(x, (256, 256))
                y = R.matmul(rows, R.const(W1))
                out = R.reshape(y, (8, 32, 512))
                R.output(out)
            return out

    graph = _graph(ReshapeMatmulReshape)
    before, matmul, after = (graph.nodes[graph.index_of(name)] for name in ("rows", "y", "out"))
    assert before.becomes_view and not after.becomes_view and not matmul.becomes_view
    check = profitability_for(TARGET)
    assert check.group_seconds(graph, [before.index]) == 0.0
    assert check.group_seconds(graph, [after.index]) > 0.0
    verdict = check.verdict(graph, [[before.index], [matmul.index]])
    assert verdict.parts_s == check.group_seconds(graph, [matmul.index]), verdict.describe()


def test_only_an_epilogue_in_place_goes_unpredicted():
    """A contraction whose output a broadcast spreads over a larger tensor, or whose output a
    slice moves across tiles, is no write-back epilogue: the check predicts those groups."""
    @I.ir_module
    class Spread:
        @R.function
        def main(x: R.Tensor((64, 256), "float32"), big: R.Tensor((64, 512), "float32")):
            with R.dataflow():
                y = R.matmul(x, R.const(W1[:, :1]))
                z = R.multiply(y, big)
                R.output(z)
            return z

    @I.ir_module
    class Sliced:
        @R.function
        def main(x: R.Tensor((64, 256), "float32")):
            with R.dataflow():
                y = R.matmul(x, R.const(W1))
                z = R.multiply(R.strided_slice(y, [1], [0], [256]), R.strided_slice(y, [1], [256], [512]))
                R.output(z)
            return z

    check = profitability_for(TARGET)
    for mod in (Spread, Sliced):
        graph = _graph(mod)
        fusible = [n.index for n in graph.nodes if n.fusible]
        assert check.verdict(graph, [[n] for n in fusible]).fused_s is not None


def test_the_check_is_for_cpu_cuda_and_dsa_targets():
    assert isinstance(profitability_for(TARGET).model, KernelCostModel)
    assert profitability_for(TARGET, enabled=False) is None
    dsa = profitability_for(tvm.target.Target("dsa/stcp920"))
    assert dsa is not None and not isinstance(dsa.model, KernelCostModel)  # tests/test_dsa_cost_check.py
    cuda = profitability_for(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    assert cuda is not None and not isinstance(cuda.model, KernelCostModel)  # tests/test_gpu_cost_check.py


# ---- every strategy consults it -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["apollo", "graphturbo", "dominator-backward", "dominator-both"])
def test_exp_prologue_is_fused_by_the_paper_and_split_with_the_check(strategy):
    assert _kernels(ExpMatmul, strategy, cost_check=False) == 1
    assert _kernels(ExpMatmul, strategy, cost_check=True) == 2


def test_neoflow_keeps_two_matmuls_apart_with_the_check():
    assert _kernels(TwoMatmuls, "neoflow", cost_check=False) == 1
    with TARGET:
        fused = fusion_pipeline("neoflow", TARGET, cost_check=True)(TwoMatmuls)
    assert verify.count_kernels(fused) == 2
    for gvar, func in fused.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            assert "matmul" not in gvar.name_hint.replace("matmul", "", 1), gvar.name_hint


@pytest.mark.parametrize("strategy", ["neoflow", "graphturbo"])
def test_channel_shuffle_fused_into_a_conv_is_kept_with_the_check(strategy):
    """The shuffle + conv kernel is predicted faster than its parts (``ShuffleConv``), so the
    check keeps the paper's one kernel."""
    assert _kernels(ShuffleConv, strategy, cost_check=False) == 1
    assert _kernels(ShuffleConv, strategy, cost_check=True) == 1


class _BytesModel(RememberedPredictions):
    """Predicts a kernel's time from the bytes of its parameters alone (1 ns per byte)."""

    def predict(self, func) -> float:
        return 1e-9 * sum(4 * math.prod(int(d) for d in param.ty.shape) for param in func.params)


def test_apollo_gives_a_conv_back_its_epilogue_when_predicted_faster():
    """APOLLO's rules 4 and 5 (section 3.3) come before rule 6: the bias and SiLU go with the
    squeeze mean and the conv runs alone, writing its raw output for that kernel to read back.
    Where the conv with its epilogue beside the mean is predicted faster
    (``ProfitabilityCheck.epilogue_verdict``; here by the bytes each kernel moves), the upward
    feedback refuses the group and APOLLO re-partitions."""
    def kernels(profitability, cost_check=True):
        with TARGET:
            fused = tvm.transform.Sequential([
                *preprocess_passes(), *apollo_preprocess(),
                ApolloFusion(cost_check=cost_check, profitability=profitability),
                relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])(ConvSiluSqueeze)
        return [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]

    paper, checked = kernels(None, cost_check=False), kernels(ProfitabilityCheck(TARGET, model=_BytesModel()))
    assert "conv2d" in paper and any(k.startswith("fused_add_tir_sigmoid_multiply_mean") for k in paper), paper
    assert "conv2d" not in checked and any(k.startswith("fused_conv2d_add_tir_sigmoid_multiply") for k in checked), \
        checked


def test_apollo_records_the_prediction_as_upward_feedback(tmp_path):
    path = tmp_path / "feedback.json"
    with TARGET:
        tvm.transform.Sequential([*preprocess_passes(), *apollo_preprocess(),
                                  ApolloFusion(feedback_path=str(path))])(ExpMatmul)
    failed = json.loads(path.read_text())["failed_patterns"]
    assert failed and all("slower than its ops" in f["reason"] for f in failed), failed


def test_apollo_compiles_downstream_only_the_groups_the_check_accepts():
    """The prediction is asked before the downstream compile: a group refused for its predicted
    time is never compiled, so a second compile (predictions read from the store) compiles as
    many groups as a compile without the check."""
    compiled = []

    def downstream(mini, pattern):
        compiled.append(pattern)

    with TARGET:
        apollo = ApolloFusion(downstream=downstream)
        tvm.transform.Sequential([*preprocess_passes(), *apollo_preprocess(), apollo])(ExpMatmul)
    refused = [p for p in apollo.checked_patterns if p not in compiled]
    assert apollo.stats["cost_rejected"] >= 1 and len(refused) == apollo.stats["cost_rejected"], \
        (apollo.checked_patterns, compiled)


@pytest.mark.parametrize("strategy", ["apollo", "neoflow", "graphturbo", "dominator-both"])
@pytest.mark.parametrize("mod", [ExpMatmul, TwoMatmuls, SplitExpMatmul, ShuffleConv, ConvSiluSqueeze],
                         ids=["exp_matmul", "two_matmuls", "split_exp_matmul", "shuffle_conv", "conv_silu_squeeze"])
def test_strategies_with_the_check_match_the_unfused_module(strategy, mod):
    verify.assert_same_as_unfused(mod, strategy)


def test_the_cli_takes_no_cost_check():
    from tvm_fusion_ext.cli import build_parser

    parser = build_parser()
    for argv in (["compile", "m.onnx", "--target", "llvm", "--fusion", "apollo", "-o", "m.so"],
                 ["compare", "--model", "mlp"], ["tune", "m.onnx", "--trials", "1", "--work-dir", "w"]):
        assert parser.parse_args(argv).cost_check is True
        assert parser.parse_args([*argv, "--no-cost-check"]).cost_check is False


# ---- calibration cache --------------------------------------------------------------------------
FAKE = Rates(launch=3e-6, bandwidth=1e10, parallel=2.0, tiled=2e10, reduce=1e9, vector=8e9, scalar=4e9)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache directory of its own and a calibration that counts its calls (no measuring)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda: calls.append(1) or FAKE)
    calibration.forget_loaded()
    yield tmp_path, calls
    calibration.forget_loaded()  # the suite's rates come back from the session directory


def test_calibration_is_reused_by_a_second_compile(cache_dir):
    path, calls = cache_dir
    assert _kernels(TwoMatmuls, "neoflow", cost_check=True) >= 1
    assert len(calls) == 1 and (path / calibration.CACHE_FILE).exists()
    calibration.forget_loaded()  # as a new process would
    assert _kernels(TwoMatmuls, "neoflow", cost_check=True) >= 1
    assert len(calls) == 1
    assert calibration.load_or_calibrate() == FAKE


def test_deleted_calibration_is_rebuilt_silently(cache_dir):
    path, calls = cache_dir
    calibration.load_or_calibrate()
    (path / calibration.CACHE_FILE).unlink()
    calibration.forget_loaded()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert calibration.load_or_calibrate() == FAKE
    assert len(calls) == 2 and not caught
    assert (path / calibration.CACHE_FILE).exists()


@pytest.mark.parametrize("content", ["{not json", json.dumps({"version": 1, "hosts": []}),
                                     "entry"], ids=["not_json", "wrong_shape", "bad_entry"])
def test_corrupt_calibration_gives_one_warning_and_is_rebuilt(cache_dir, content):
    path, calls = cache_dir
    file = path / calibration.CACHE_FILE
    if content == "entry":
        content = json.dumps({"version": 1, "hosts": {calibration.host_key(): {"launch": -1}}})
    file.write_text(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _kernels(TwoMatmuls, "neoflow", cost_check=True) >= 1
    assert len([w for w in caught if "kernel-cost calibration" in str(w.message)]) == 1
    assert len(calls) == 1
    hosts = json.loads(file.read_text())["hosts"]
    assert Rates.from_json(hosts[calibration.host_key()]) == FAKE


def test_predictions_persist_by_structure(cache_dir, monkeypatch):
    path, _ = cache_dir
    scheduled = []
    original = cost_model.untuned_schedule
    monkeypatch.setattr(cost_model, "untuned_schedule",
                        lambda func, target: scheduled.append(1) or original(func, target))
    graph = _graph(TwoMatmuls)
    check = ProfitabilityCheck(TARGET, FAKE)
    first = check.verdict(graph, [[0], [1], [2, 3]])
    count = len(scheduled)
    assert count >= 3
    # a new check on a rebuilt graph: every group is remembered, nothing is fused or scheduled
    again = ProfitabilityCheck(TARGET, FAKE).verdict(_graph(TwoMatmuls), [[0], [1], [2, 3]])
    assert again == first and len(scheduled) == count
    # a new process reads the store; a corrupt line costs one warning, not the other entries
    (store,) = path.glob("predictions-*.jsonl")
    with store.open("a") as out:
        out.write("{broken\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = KernelCostModel(TARGET, FAKE, store)
    assert len(caught) == 1 and len(fresh.cache) == len(check.model.cache)
    assert all(math.isclose(fresh.cache[k], v) for k, v in check.model.cache.items() if math.isfinite(v))


def test_calibrate_command_rewrites_the_entry(cache_dir, capsys):
    """It measures the kernel rates again, and NeoFlow's device costs of the host, so that the
    next compile measures nothing."""
    path, calls = cache_dir
    calibration.load_or_calibrate()
    assert not (path / "device_costs.json").exists()
    assert cli_main(["calibrate"]) == 0
    assert len(calls) == 2
    assert str(path / calibration.CACHE_FILE) in capsys.readouterr().out
    assert (path / "device_costs.json").exists()


def test_real_calibration_is_short_and_plausible(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    start = time.perf_counter()
    with warnings.catch_warnings():  # a one-thread pool (or a busy CI machine) warns
        warnings.simplefilter("ignore")
        rates = calibration.calibrate()
    assert time.perf_counter() - start < 30
    values = rates.to_json()
    assert all(math.isfinite(v) and v > 0 for v in values.values()), values
    # a register-tiled contraction beats a scalar accumulation chain on any CPU
    assert rates.tiled > rates.reduce, values
    assert 1.0 <= rates.parallel <= 64


def test_a_calibration_on_a_busy_machine_warns(tmp_path, monkeypatch):
    """The kernels are timed in the order of the calibration module's docstring: the third, the
    vectorised kernel on every core, is measured twice as slow as the second, the same kernel on
    one core (as when other jobs hold the cores); the parallel speedup is kept at 1, with a
    warning that says to calibrate again."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    times = iter([1e-3, 1e-3, 2e-3, 1e-3, 1e-3, 1e-3])
    monkeypatch.setattr(calibration, "_time", lambda func, target: next(times))
    monkeypatch.setattr(calibration, "spec_for_target",
                        lambda target: dataclasses.replace(hardware_spec.spec_for_target(target), num_cores=2))
    with pytest.warns(UserWarning, match="parallel loops measured no faster than serial ones"):
        rates = calibration.calibrate()
    assert rates.parallel == 1.0


def test_symbolic_shapes_get_no_prediction_and_the_paper_decides():
    from tvm import relax

    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 256), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(relax.op.exp(x), relax.const(W1)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    graph = _graph(bb.get())
    verdict = profitability_for(TARGET).verdict(graph, [[0], [1]])
    assert verdict.profitable and verdict.gain_s is None and "symbolic" in verdict.describe()


def test_element_wise_groups_get_no_prediction():
    graph = _graph(MatmulBiasRelu)
    tail = [n.index for n in graph.nodes if n.fusible and n.pattern <= OpPattern.INJECTIVE]
    assert len(tail) >= 2
    verdict = profitability_for(TARGET).verdict(graph, [[n] for n in tail])
    assert verdict.profitable and verdict.gain_s is None and "element-wise" in verdict.describe()


def test_predictions_of_another_schedule_are_kept_apart(monkeypatch):
    """A prediction is the time of the kernel the schedule made: the store's name follows the
    schedule's source, so predictions made before a schedule change are not read after it."""
    rates = cost_model.Rates(launch=2e-6, bandwidth=2e10, parallel=2.0, tiled=3.5e10, reduce=3e9, vector=1.3e10,
                             scalar=6e9)
    target = tvm.target.Target("llvm")
    before = cost_model.store_name(target, rates, "host")
    assert cost_model.store_name(target, rates, "host") == before
    monkeypatch.setattr(cost_model, "schedule_fingerprint", lambda: "a changed schedule")
    assert cost_model.store_name(target, rates, "host") != before


def test_predictions_for_other_caches_are_kept_apart(monkeypatch):
    """The schedule tiles for the caches the spec reads from the host: a target's predictions made
    with other cache sizes (another host of the same CPU name, a test pinning them) are not read."""
    rates = cost_model.Rates(launch=2e-6, bandwidth=2e10, parallel=2.0, tiled=3.5e10, reduce=3e9, vector=1.3e10,
                             scalar=6e9)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})
    monkeypatch.setattr(hardware_spec, "host_caches", lambda: {1: 32 * 1024, 2: 1024 * 1024, 3: 32 << 20})
    zen4 = cost_model.store_name(target, rates, "host")
    monkeypatch.setattr(hardware_spec, "host_caches", lambda: {1: 48 * 1024, 2: 2048 * 1024, 3: 300 << 20})
    assert cost_model.store_name(target, rates, "host") != zen4

"""``OpenCompoundOps`` and ``ApolloFusion`` on small hand-written modules: numerics against the
unfused module, kernels per layer, and upward feedback (apollo-fusion.txt sections 3-5)."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_ext  # noqa: F401  (registers the pipelines)
from tvm_fusion_ext.analysis.graph import build_graph
from tvm_fusion_ext.analysis.primitive_types import PrimitiveType
from tvm_fusion_ext.hardware import spec_for_target
from tvm_fusion_ext.ir_utils import is_primitive
from tvm_fusion_ext.partitioners.apollo import TABLE_1, ApolloPartitioner, without_rules
from tvm_fusion_ext.partitioners.apollo.micro_graphs import apollo_type
from tvm_fusion_ext.pipelines import fusion_pipeline, preprocess_passes
from tvm_fusion_ext.relax_passes.apollo_fusion import ApolloFusion, apollo_preprocess
from tvm_fusion_ext.relax_passes.open_compound_ops import OpenCompoundOps
from tvm_fusion_ext.testing.verify import assert_same_as_unfused, build, kernel_traffic, random_inputs, run

TARGET = tvm.target.Target("llvm")


@I.ir_module
class LayerNormChain:
    @R.function
    def main(x: R.Tensor((8, 64), "float32"), g: R.Tensor((64,), "float32"), b: R.Tensor((64,), "float32")):
        with R.dataflow():
            a = R.nn.layer_norm(x, g, b, axes=[-1])
            c = R.nn.gelu(a)
            d = R.nn.layer_norm(c, g, b, axes=[-1])
            R.output(d)
        return d


@I.ir_module
class SoftmaxChain:
    @R.function
    def main(x: R.Tensor((4, 8, 32), "float32")):
        with R.dataflow():
            a = R.multiply(x, R.const(0.125, "float32"))
            s = R.nn.softmax(a, axis=-1)
            t = R.nn.log_softmax(R.exp(s), axis=-1)
            R.output(t)
        return t


@I.ir_module
class BiasResidualLayerNorm:
    @R.function
    def main(x: R.Tensor((16, 48), "float32"), w: R.Tensor((48, 48), "float32"),
             bias: R.Tensor((48,), "float32"), g: R.Tensor((48,), "float32"), b: R.Tensor((48,), "float32")):
        with R.dataflow():
            m = R.matmul(x, w)
            y = R.add(m, bias)
            r = R.add(y, x)
            n = R.nn.layer_norm(r, g, b, axes=[-1])
            R.output(n)
        return n


@I.ir_module
class MultiHead:
    @R.function
    def main(x: R.Tensor((8, 16), "float32"), y: R.Tensor((4, 4), "float32")):
        with R.dataflow():
            h = R.permute_dims(x)  # a transpose: no Table 1 rule fuses its consumers into it
            a = R.exp(R.subtract(h, R.const(1.0, "float32")))
            b = R.tanh(h)
            c = R.sigmoid(R.multiply(h, h))
            d = R.nn.relu(y)  # an independent sub-graph
            R.output(a, b, c, d)
        return (a, b, c, d)


@I.ir_module
class Branches:
    @R.function
    def main(x: R.Tensor((8, 16), "float32")):
        with R.dataflow():
            h = R.permute_dims(x)
            a = R.exp(h)
            b = R.tanh(h)
            c = R.sigmoid(h)
            R.output(a, b, c)
        return (a, b, c)


def _opened(mod):
    pre = tvm.transform.Sequential(preprocess_passes())(mod)
    return tvm.transform.Sequential(apollo_preprocess())(pre)


def test_open_compound_ops_gives_one_type_per_kernel():
    mod = _opened(LayerNormChain)
    graph = build_graph(mod)
    kernels = [n for n in graph.nodes if n.prim_func is not None]
    assert all(len(n.classification.blocks) == 1 or not n.classification.is_compound
               or len({b.ptype for b in n.classification.blocks}) == 1 for n in kernels)
    types = [n.ptype for n in kernels]
    assert types.count(PrimitiveType.REDUCTION) == 4  # sum and variance of each layer norm
    inputs = random_inputs(LayerNormChain["main"])
    expected = run(build(LayerNormChain, "none", policy="unscheduled"), inputs)
    opened = run(tvm.compile(mod, TARGET), inputs)
    np.testing.assert_allclose(opened[0], expected[0], rtol=1e-5, atol=1e-5)


def test_open_compound_ops_keeps_padding_with_its_conv():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    w = relax.Var("w", relax.TensorType((4, 3, 3, 3), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, w, padding=1))
        bb.emit_func_output(out)
    mod = tvm.transform.Sequential(preprocess_passes())(bb.get())
    opener = OpenCompoundOps()
    opener(mod)
    assert opener.opened == 0


@pytest.mark.parametrize("mod", [LayerNormChain, SoftmaxChain, BiasResidualLayerNorm, MultiHead],
                         ids=["layernorm_chain", "softmax_chain", "bias_residual_layernorm", "multi_head"])
@pytest.mark.parametrize("fusion", ["apollo-no-stitch", "apollo-no-parallel", "apollo"])
def test_numerics_match_unfused(mod, fusion):
    assert_same_as_unfused(mod, fusion)


@I.ir_module
class DataMovement:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32"), i: R.Tensor((3,), "int64")):
        with R.dataflow():
            a = R.reshape(x, (2, 16))
            b = R.expand_dims(y, 0)
            c = R.concat([x, y], axis=0)
            d = R.strided_slice(x, axes=[1], begin=[2], end=[6])
            e = R.take(x, i, axis=0)
            f = R.permute_dims(x)
            R.output(a, b, c, d, e, f)
        return (a, b, c, d, e, f)


def test_data_movement_sub_kinds():
    graph = build_graph(tvm.transform.Sequential(preprocess_passes())(DataMovement))
    types = [apollo_type(n).value for n in graph.nodes if n.prim_func is not None]
    # expand_dims only adds a unit dimension: element-wise already (section 3.3's relations skip
    # unit loops); concatenation and slicing move data, but not each element once in order; the
    # gather clamps its data-dependent indices (arithmetic), so it stays opaque
    assert types == ["reshape", "element-wise", "data-movement", "data-movement", "opaque", "transpose"]


def _kernels(mod, fusion):
    return kernel_traffic(fusion_pipeline(fusion, TARGET)(mod)).kernels


def test_layers_reduce_kernels():
    # LayerNorm chain: Layer I leaves each reduction's consumer apart; Layer II stitches the rows.
    assert _kernels(LayerNormChain, "apollo-no-stitch") > _kernels(LayerNormChain, "apollo-no-parallel")
    assert _kernels(LayerNormChain, "apollo-no-parallel") == 1
    assert _kernels(SoftmaxChain, "apollo-no-parallel") == 1
    # bias + residual + layer norm: rule 5 (broadcast -> reduction) outranks the matmul epilogue,
    # so the bias and residual adds join the layer norm, one row-stitched kernel after the matmul
    assert _kernels(BiasResidualLayerNorm, "apollo-no-parallel") == 2
    # multi-head: three small branches after a transpose, and an independent relu: Layer III
    # stitches the branches side by side into one kernel
    assert _kernels(MultiHead, "apollo-no-parallel") == 5
    assert _kernels(MultiHead, "apollo") == 2


@pytest.mark.parametrize("target", ["dsa/stcp920", {"kind": "cuda", "arch": "sm_90"}])
def test_off_the_cpu_the_feedback_compiles_groups_as_the_target_does(target):
    """The downstream compiler of the upward feedback is the target's own (its backend's schedule):
    on the DSA and on CUDA the layer-norm and softmax chains are stitched into one kernel as on
    the CPU, instead of every group failing the CPU schedule's build for another target."""
    resolved = tvm.target.Target(target)
    for chain in (LayerNormChain, SoftmaxChain):
        with resolved:
            fused = fusion_pipeline("apollo-no-parallel", resolved)(chain)
        assert kernel_traffic(fused).kernels == 1
    if resolved.kind.name != "cuda":  # running the CUDA build needs a GPU
        assert_same_as_unfused(SoftmaxChain, "apollo", target=target)


def _counting_check(fail_on):
    calls = []

    def check(mini, pattern):
        calls.append(pattern)
        return "injected failure" if fail_on(pattern) else None

    return check, calls


def test_feedback_splits_failing_micro_graph_and_is_remembered(tmp_path):
    path = tmp_path / "apollo_feedback.json"
    mod = _opened(SoftmaxChain)

    def is_target(pattern):  # the Layer II group holding the first softmax's max reduction
        return pattern.count("reduction:") >= 2

    check, calls = _counting_check(is_target)
    first = ApolloFusion(("I", "II"), feedback_path=str(path), downstream=check)
    fused = first(mod)
    failed = [p for p in calls if is_target(p)]
    assert failed, "the injected failure never fired"
    data = json.loads(path.read_text())
    assert {e["pattern"] for e in data["failed_patterns"]} >= set(failed)
    assert first.stats["feedback_splits"] >= 1
    # the regenerated partition holds no failing pattern, and still computes the same thing
    assert not any(is_target(p) for p in first.checked_patterns[-len(calls):] if p not in failed)
    out = run(tvm.compile(relax.transform.FuseTIR()(fused), TARGET), random_inputs(mod["main"]))
    ref = run(tvm.compile(mod, TARGET), random_inputs(mod["main"]))
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-5, atol=1e-6)

    check2, calls2 = _counting_check(is_target)
    second = ApolloFusion(("I", "II"), feedback_path=str(path), downstream=check2)
    second(mod)
    assert not any(p in failed for p in calls2)  # read from the file: never tried again
    assert second.stats["feedback_splits"] == 0


def test_groups_the_loop_fusion_pass_declines_are_split(tmp_path):
    from tvm_fusion_ext.hardware import spec_for_target
    from tvm_fusion_ext.relax_passes.apollo_fusion import DownstreamCompiler
    from tvm_fusion_ext.tir_passes.plain_schedule import PlainSchedule

    mod = _opened(BiasResidualLayerNorm)
    spec = spec_for_target(TARGET)
    # the real default schedule fuses every group's loops: nothing fails
    fusion = ApolloFusion(("I", "II"), downstream=DownstreamCompiler(TARGET, spec))
    with TARGET:
        fusion(mod)
    assert fusion.stats["feedback_splits"] == 0 and fusion.stats["groups"] == 2
    # a downstream compiler without the loop-fusion rule compiles every group as separate loop
    # nests: each multi-op group is a failure, recorded with that reason, and split (the
    # profitability check, asked first, would refuse some of them for their predicted time)
    path = tmp_path / "feedback.json"
    plain = DownstreamCompiler(TARGET, spec, schedule_rules=[PlainSchedule(spec)])
    fusion = ApolloFusion(("I", "II"), feedback_path=str(path), downstream=plain, cost_check=False)
    with TARGET:
        fused = fusion(mod)
    reasons = {e["reason"] for e in json.loads(path.read_text())["failed_patterns"]}
    assert reasons == {"the loop-fusion pass declined (PlainSchedule instead)"}
    assert kernel_traffic(relax.transform.FuseTIR()(fused)).kernels > 2
    # a Layer III composition of independent single ops has no loops to fuse: it only has to compile
    fusion = ApolloFusion(("I", "II", "III"), downstream=plain)
    with TARGET:
        fused = fusion(_opened(Branches))
    assert fusion.stats["feedback_splits"] == 0
    assert kernel_traffic(relax.transform.FuseTIR()(fused)).kernels == 2  # the transpose, the branches


def test_feedback_without_file_stays_in_memory():
    mod = _opened(LayerNormChain)
    check, calls = _counting_check(lambda p: True)  # the downstream compiler fails on everything
    fusion = ApolloFusion(("I", "II"), downstream=check)
    fused = fusion(mod)
    assert calls and fusion.stats["feedback_splits"] == len(set(calls))
    # every multi-op group failed, so no two ops share a kernel: only each layer norm's pieces
    # are one kernel again, the op's own (closed after the feedback)
    grouped = [gv.name_hint for gv, f in fused.functions_items()
               if isinstance(f, relax.Function) and is_primitive(f)]
    assert fusion.stats["compound_ops_closed"] == 2
    assert grouped and all(name.startswith("fused_layer_norm_") and "gelu" not in name
                           for name in grouped)


@I.ir_module
class ResidualLayerNorm:
    @R.function
    def main(x: R.Tensor((64, 256), "float32"), y: R.Tensor((64, 256), "float32"),
             g: R.Tensor((256,), "float32"), b: R.Tensor((256,), "float32")):
        with R.dataflow():
            s = R.add(x, y)
            n = R.nn.layer_norm(s, g, b, axes=[-1])
            R.output(n)
        return n


def test_a_partly_fused_op_is_closed_where_predicted_faster():
    """Layer I alone fuses the layer norm's first reduction with the residual add and leaves its
    other pieces as two kernels; with the profitability check the layer norm is one kernel again,
    the add another, as in ``stock``; without it, aggregation's three kernels stand."""
    kernels = {}
    for cost_check in (False, True):
        fusion = ApolloFusion(("I",), cost_check=cost_check)
        with TARGET:
            kernels[cost_check] = kernel_traffic(relax.transform.FuseTIR()(fusion(_opened(ResidualLayerNorm)))).kernels
        assert fusion.stats["compound_ops_closed"] == int(cost_check)
    assert kernels == {False: 3, True: 2}
    assert _kernels(ResidualLayerNorm, "apollo-no-stitch") == _kernels(ResidualLayerNorm, "stock") == 2
    assert_same_as_unfused(ResidualLayerNorm, "apollo-no-stitch")


@I.ir_module
class ScaledMaskedSoftmax:
    @R.function
    def main(x: R.Tensor((4, 32, 32), "float32"), mask: R.Tensor((1, 32), "float32")):
        with R.dataflow():
            scaled = R.multiply(x, R.const(0.125, "float32"))  # the scalar folds: element-wise
            masked = R.add(scaled, mask)                        # broadcast
            y = R.nn.softmax(masked, axis=-1)
            R.output(y)
        return y


def test_an_element_wise_producer_joins_its_broadcast_consumer():
    """APOLLO Fig. 5's scale -> mask -> softmax is one kernel: the scale by a folded scalar is
    element-wise, the mask add broadcast (the ``2-element-wise`` row of ``TABLE_1``)."""
    graph = build_graph(tvm.transform.Sequential(preprocess_passes())(ScaledMaskedSoftmax))
    types = [apollo_type(n) for n in graph.nodes if n.prim_func is not None]
    assert types[:2] == [PrimitiveType.ELEMENTWISE, PrimitiveType.BROADCAST]
    spec = spec_for_target(TARGET)
    paper_rows = without_rules(TABLE_1, "2-element-wise")
    assert len(ApolloPartitioner(spec)(graph)) == 1
    assert len(ApolloPartitioner(spec, rules=paper_rows)(graph)) == 2  # the scale stays apart
    assert _kernels(ScaledMaskedSoftmax, "apollo-no-parallel") == 1
    assert_same_as_unfused(ScaledMaskedSoftmax, "apollo")


@I.ir_module
class AttentionScores:
    @R.function
    def main(q: R.Tensor((4, 32, 16), "float32"), k: R.Tensor((4, 16, 32), "float32"),
             v: R.Tensor((4, 32, 16), "float32")):
        with R.dataflow():
            s = R.matmul(q, k)
            p = R.nn.softmax(s, axis=-1)
            o = R.matmul(p, v)
            R.output(o)
        return o


def test_an_opened_op_that_no_group_fused_is_one_kernel_again():
    """Layer I alone fuses none of the softmax's pieces with the matmuls around it, and leaves its
    reductions apart from their followers: the softmax is closed into one kernel again, as in
    ``stock``."""
    fusion = ApolloFusion(("I",), cost_check=False)
    with TARGET:
        fusion(_opened(AttentionScores))
    assert fusion.stats["compound_ops_closed"] == 1
    assert _kernels(AttentionScores, "apollo-no-stitch") == _kernels(AttentionScores, "stock") == 3
    assert_same_as_unfused(AttentionScores, "apollo-no-stitch")

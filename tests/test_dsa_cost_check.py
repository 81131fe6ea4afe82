"""The profitability check on DSA targets (tvm_fusion_ext.cost.dsa_model): a group is predicted by
simulating the kernel the DSA backend's staging schedule makes of it, so groups whose tile
recomputes its producers or that the schedule cannot stage are refused, and the strategies other
than GraphTurbo (which has its own judge) never fall far below ``stock`` for want of a check."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.analysis.graph import build_graphs
from tvm_fusion_ext.cost import DSAKernelModel, ProfitabilityCheck, fused_kernel, profitability_for
from tvm_fusion_ext.driver.static_profile import static_profile
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.target_dsa.schedule import generate_kernel
from tvm_fusion_ext.testing import differential

DSA = tvm.target.Target("dsa/stcp920")
_rng = np.random.default_rng(3)
W_CONV = (_rng.standard_normal((16, 32, 3, 3)) * 0.1).astype("float32")
W_QKV = (_rng.standard_normal((64, 192)) * 0.1).astype("float32")
BIAS = _rng.standard_normal((64,)).astype("float32")


@I.ir_module
class UpsampleConcatConv:
    """A U-Net decoder step: the coarse map upsampled, concatenated with the skip connection, and
    convolved."""

    @R.function
    def main(x: R.Tensor((1, 16, 16, 16), "float32"), skip: R.Tensor((1, 16, 32, 32), "float32")):
        with R.dataflow():
            up = R.image.resize2d(x, size=(32, 32), method="nearest_neighbor")
            cat = R.concat((up, skip), axis=1)
            out = R.nn.conv2d(cat, R.const(W_CONV), padding=(1, 1))
            R.output(out)
        return out


@I.ir_module
class SlicedProjection:
    """One projection for queries, keys and values (as NeoFlow's parallel fusion makes it), the
    query slice with its bias: the matmul's result is read by the other slices as well."""

    @R.function
    def main(x: R.Tensor((16, 64), "float32")):
        with R.dataflow():
            qkv = R.matmul(x, R.const(W_QKV))
            q = R.add(R.strided_slice(qkv, axes=[1], begin=[0], end=[64]), R.const(BIAS))
            k = R.strided_slice(qkv, axes=[1], begin=[64], end=[128])
            v = R.strided_slice(qkv, axes=[1], begin=[128], end=[192])
            R.output(q, k, v)
        return (q, k, v)


def _graph(mod, target=DSA):
    with target:
        return build_graphs(tvm.transform.Sequential(preprocess_passes())(mod))[0]


def _index(graph, callee: str) -> int:
    (node,) = [n for n in graph.nodes if n.callee == callee]
    return node.index


def test_dsa_targets_get_the_simulator_model():
    check = profitability_for(DSA)
    assert isinstance(check, ProfitabilityCheck) and isinstance(check.model, DSAKernelModel)
    assert profitability_for(DSA, enabled=False) is None


def test_a_prediction_is_the_simulated_kernel_of_the_staging_schedule():
    graph = _graph(UpsampleConcatConv)
    kernel = fused_kernel(graph, [1, 2], layout_free=False)
    model = DSAKernelModel(DSA)
    _, how, cycles = generate_kernel((kernel, model.spec, None))
    assert how == "scheduled"
    assert model.seconds(kernel) == pytest.approx(cycles / model.spec.clock_hz)


def test_an_upsampled_concatenation_feeding_a_conv_is_refused():
    """The conv's tile recomputes the concatenation and the upsampling of its halo: simulated at
    1.7x its two kernels apart (NeoFlow made a U-Net decoder 21x slower than ``stock`` with it)."""
    graph = _graph(UpsampleConcatConv)
    conv = _index(graph, "conv2d")
    verdict = profitability_for(DSA).verdict(graph, [[0, 1], [conv]])
    assert not verdict.profitable and verdict.fused_s > 1.3 * verdict.parts_s, verdict.describe()


def test_a_contraction_whose_result_leaves_the_group_is_judged_on_a_dsa():
    """On a CPU a contraction with an epilogue is left to the strategy; on a DSA the matmul whose
    result the other slices read makes a kernel of two outputs, which the staging schedule
    cannot stage: it would run straight from DDR."""
    graph = _graph(SlicedProjection)
    parts = [[_index(graph, "matmul")], [_index(graph, "strided_slice")]]
    verdict = profitability_for(DSA).verdict(graph, parts)
    assert not verdict.profitable and verdict.fused_s > 2 * verdict.parts_s, verdict.describe()
    cpu = tvm.target.Target("llvm")
    assert profitability_for(cpu).verdict(_graph(SlicedProjection, cpu), parts).fused_s is None


STRATEGIES = ["dominator-backward", "apollo", "neoflow"]


def test_the_strategies_keep_up_with_stock_on_the_dsa_where_their_rules_alone_fall_behind():
    """Each of these strategies' rules fuses the projection with its slice (NeoFlow's greedy
    search, APOLLO's rules, backward fusion): without the check that kernel runs unstaged and
    the model simulates several times slower than ``stock``; with it each keeps up, and computes
    the same numbers."""
    stock = static_profile(SlicedProjection, "stock", DSA)["cycles"]
    for fusion in STRATEGIES:
        assert static_profile(SlicedProjection, fusion, DSA, cost_check=False)["cycles"] > 3 * stock, fusion
        assert static_profile(SlicedProjection, fusion, DSA)["cycles"] <= stock, fusion
    assert relax.analysis.check_well_formed(SlicedProjection)
    result = differential.check_module(SlicedProjection, STRATEGIES, targets=("dsa/stcp920",))
    assert result.checked == len(STRATEGIES) and not result.failures, result.failures

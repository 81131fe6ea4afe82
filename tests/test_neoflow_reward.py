"""NeoFlow's fusion reward (section 5.1, Eq. (4), Fig. 6) and greedy fusion by best reward."""

import pytest

from tvm_fusion_ext.analysis.graph import DataflowGraph, OpPattern
from tvm_fusion_ext.hardware.device_costs import DeviceCosts
from tvm_fusion_ext.partitioners.neoflow import (
    Arity,
    FusionDelta,
    GreedyRewardPartitioner,
    RewardModel,
    arity,
    fig6_delta,
)

# A device with Pd = 10 GB/s, Pc = 20 GFLOP/s, L = 5 us.
COSTS = DeviceCosts(bandwidth=10e9, flops=20e9, launch=5e-6)
MB = 1 << 20


def test_equation_4():
    assert COSTS.reward(10e9, 0, 0) == pytest.approx(1.0)
    assert COSTS.reward(0, -20e9, 0) == pytest.approx(-1.0)
    assert COSTS.reward(0, 0, 2) == pytest.approx(10e-6)
    assert FusionDelta(10e9, -20e9, 2).reward(COSTS) == pytest.approx(10e-6)


def test_arity():
    assert arity(1) is Arity.ONE and arity(0) is Arity.ONE
    assert arity(2) is Arity.MANY and arity(5) is Arity.MANY


@pytest.mark.parametrize("t_b", [4, 1 * MB, 256 * MB])
@pytest.mark.parametrize("op1", [0, 1e6, 1e12])
def test_one_one_is_always_positive(t_b, op1):
    delta = fig6_delta(Arity.ONE, Arity.ONE, t_b, op1)
    assert delta == FusionDelta(4 * t_b, 0.0, 2)
    assert delta.reward(COSTS) > 0


@pytest.mark.parametrize("producer, consumer", [(Arity.ONE, Arity.MANY), (Arity.MANY, Arity.ONE)])
def test_one_many_depends_on_the_size(producer, consumer):
    # a cheap producer (ReLU-like: 1 FLOP per 4-byte element) on 1 MB: fusing pays
    cheap = fig6_delta(producer, consumer, 1 * MB, op_producer=MB / 4)
    assert cheap.flops < 0 and cheap.bytes >= 4 * MB and cheap.reward(COSTS) > 0
    # an expensive producer (a GEMM of 1 TFLOP) whose recomputation outweighs 4-5 MB saved
    costly = fig6_delta(producer, consumer, 1 * MB, op_producer=1e12)
    assert costly.reward(COSTS) < 0


def test_many_many_depends_on_transfer_and_recompute():
    # conv + conv: B small, the producer's inputs large, recomputation twice: refused
    bad = fig6_delta(Arity.MANY, Arity.MANY, 1 * MB, op_producer=1e9, t_producer_inputs=64 * MB)
    assert bad.bytes == 6 * MB - 64 * MB and bad.flops == -2e9 and bad.reward(COSTS) < 0
    # B large (6 T_B > T_D + T_E) and the producer cheap: accepted
    good = fig6_delta(Arity.MANY, Arity.MANY, 64 * MB, op_producer=1e6, t_producer_inputs=8 * MB)
    assert good.reward(COSTS) > 0


def _chain():
    """relu -> exp -> matmul (reuses its input 512 times) -> add; 1 MB tensors."""
    return DataflowGraph.from_edges(
        {"relu": "element-wise", "exp": "element-wise", "mm": "matmul", "add": "element-wise"},
        [("relu", "exp"), ("exp", "mm"), ("mm", "add")], outputs=["add"],
        flops={"relu": MB // 4, "exp": 8 * MB // 4, "mm": 2 * 512 * MB // 4, "add": MB // 4},
        out_bytes={n: MB for n in ("relu", "exp", "mm", "add")})


def test_graph_reward_elementwise_pair():
    g = _chain()
    model = RewardModel(COSTS)
    delta = model.delta(g, [0], [1])
    assert delta == FusionDelta(2 * MB, 0.0, 1)  # store + load of relu's output, one launch
    assert model.profitable(g, [0], [1])


def test_graph_reward_producer_into_reusing_consumer_is_refused():
    g = _chain()
    model = RewardModel(COSTS)
    delta = model.delta(g, [1], [2])  # exp recomputed 511 more times inside the matmul
    assert delta.flops == pytest.approx(-511 * 8 * MB / 4)
    assert not model.profitable(g, [1], [2])
    assert model.profitable(g, [2], [3])  # the epilogue after the matmul is free


def test_coupling_keeps_saved_tensor_and_halves_the_saving():
    """A forward tensor also read by a backward op stays materialised: only its load is saved."""
    g = DataflowGraph.from_edges(
        {"fwd1": "element-wise", "fwd2": "element-wise", "bwd": "element-wise"},
        [("fwd1", "fwd2"), ("fwd1", "bwd"), ("fwd2", "bwd")], outputs=["bwd"],
        out_bytes={"fwd1": MB, "fwd2": MB, "bwd": MB})
    assert RewardModel(COSTS).delta(g, [0], [1]) == FusionDelta(MB, 0.0, 1)


def test_greedy_partition():
    g = _chain()
    partitioner = GreedyRewardPartitioner(RewardModel(COSTS))
    groups = partitioner(g)
    assert sorted(groups) == [[0, 1], [2, 3]]  # never exp into the matmul
    assert all(r > 0 for r, _ in partitioner.merges)


def test_greedy_never_creates_a_cycle():
    """a -> b -> c and a -> c: {a, c} alone would make b both after and before the kernel."""
    g = DataflowGraph.from_edges({"a": "element-wise", "b": "opaque", "c": "element-wise"},
                                 [("a", "b"), ("b", "c"), ("a", "c")], outputs=["c"],
                                 patterns={"b": OpPattern.OPAQUE}, out_bytes={"a": MB, "b": MB, "c": MB})
    assert GreedyRewardPartitioner(RewardModel(COSTS))(g) == []

"""Contraction chains as NeoFlow's greedy search reaches them (``cost/chain_groups.py``).

Eq. (4) charges a 1x1 expansion conv fused into the 3x3 depthwise conv reading it with nine
recomputations of the expansion; the chain schedule (``tir_passes/contraction_chain.py``)
computes a block of rows and its halo instead, so with the profitability check the merge is
queued without that term and decided by the predicted times.

Decisions are taken for a Zen 4 CPU (AVX-512) with the rates ``tvm-fusion calibrate`` measured on
one, so they do not depend on the machine running the tests (with 8-lane vectors and the suite's
slower rates, tests/conftest.py, the same chains are predicted slower than their parts: compute
then outweighs the traffic they save), and with a Zen 4's caches (the chain rule sizes its blocks
to the L2, which the spec reads from the host); kernels run compiled for an AVX2 CPU.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fusion_ext.analysis.graph import OpPattern, build_graphs
from tvm_fusion_ext.analysis.primitive_types import PrimitiveType
from tvm_fusion_ext.cost import KernelCostModel, ProfitabilityCheck, Rates
from tvm_fusion_ext.cost.chain_groups import is_chain_group, takes_chains
from tvm_fusion_ext.hardware import spec
from tvm_fusion_ext.hardware.device_costs import DeviceCosts
from tvm_fusion_ext.pipelines import lowering_passes, preprocess_passes, schedule_passes
from tvm_fusion_ext.relax_passes.neoflow_fusion import NeoFlowFusion
from tvm_fusion_ext.testing import verify
from tvm_fusion_ext.testing.chains import dw_pw_module, pw_dw_module

ZEN4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})
# NeoFlow's Pd / Pc / L (Eq. (4)) as measured on a quiet 2-core Zen 4 host; measured in the test,
# a busy machine's values can flip Eq. (4)'s verdict.
ZEN4_COSTS = DeviceCosts(bandwidth=2.5e10, flops=1.9e11, launch=1.7e-7)
ZEN4_RATES = Rates(launch=2e-7, bandwidth=3.9e10, parallel=1.95, tiled=9.75e10, reduce=2.2e9, vector=8.4e10,
                   scalar=8.3e10)
TARGET = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
EXPANSION = pw_dw_module(24, 56, 144, layout="NHWC")  # MobileNetV2's second block, first half
ZEN4_CACHES = {1: 32 * 1024, 2: 1024 * 1024, 3: 32 * 1024 * 1024}  # bytes per level, per core below L3


@pytest.fixture(autouse=True)
def zen4_caches(monkeypatch):
    monkeypatch.setattr(spec, "host_caches", lambda: ZEN4_CACHES)


def _graph(mod):
    with ZEN4:
        prepared = tvm.transform.Sequential(preprocess_passes())(mod)
    (graph,) = build_graphs(prepared, "main")
    return graph


def _contractions(graph):
    return [node.index for node in graph.nodes if node.pattern is OpPattern.OUT_EWISE_FUSABLE]


def test_an_expansion_and_the_depthwise_conv_reading_it_are_one_chain_group():
    graph = _graph(EXPANSION)
    everything = [node.index for node in graph.nodes]
    assert len(_contractions(graph)) == 2
    assert is_chain_group(graph, everything, ZEN4)


def test_one_contraction_with_its_epilogue_is_no_chain_group():
    graph = _graph(EXPANSION)
    _, second = sorted(_contractions(graph))
    assert not is_chain_group(graph, [n for n in range(second)], ZEN4)


def test_chains_are_for_cpus_only():
    graph = _graph(EXPANSION)
    everything = [node.index for node in graph.nodes]
    assert takes_chains(TARGET)
    for target in (tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), tvm.target.Target("dsa/stcp920")):
        assert not takes_chains(target)
        assert not is_chain_group(graph, everything, target)


def test_an_intermediate_read_outside_the_group_is_no_chain():
    """The expansion's activated output is also a block output (read after the kernel): it must
    be written whole, so no tile can hold it."""
    graph = _graph(EXPANSION)
    first, second = sorted(_contractions(graph))
    everything = [node.index for node in graph.nodes]
    for node in graph.nodes[first + 1:second]:
        node.is_block_output = True
        assert not is_chain_group(graph, everything, ZEN4)
        node.is_block_output = False


@pytest.mark.parametrize("mod", [EXPANSION, pw_dw_module(8, 112, 64, layout="NHWC"),
                                 dw_pw_module(96, 56, 24, layout="NHWC")],
                         ids=["pw_dw", "pw_dw_112", "dw_pw"])
def test_neoflow_fuses_a_chain_only_with_the_check(mod):
    """Eq. (4) as written refuses the merge for its recomputation; with the check it is one
    kernel, and that kernel computes what the unfused module computes."""
    with ZEN4:
        prepared = tvm.transform.Sequential(preprocess_passes())(mod)
        paper = NeoFlowFusion(ZEN4_COSTS, cost_check=False)(prepared)
        checked = NeoFlowFusion(ZEN4_COSTS, profitability=ProfitabilityCheck(ZEN4, ZEN4_RATES))(prepared)
    assert verify.count_kernels(relax.transform.FuseTIR()(paper)) == 2
    assert verify.count_kernels(relax.transform.FuseTIR()(checked)) == 1
    inputs = verify.random_inputs(mod["main"], seed=5)
    assert all(np.abs(x).max() > 0 for x in inputs)
    expected = verify.run(verify.build(mod, "none", "llvm", "unscheduled"), inputs)
    rest = tvm.transform.Sequential([relax.transform.FuseTIR(), relax.transform.DeadCodeElimination(),
                                     *schedule_passes(TARGET, "untuned"), *lowering_passes(TARGET)])
    with TARGET:
        got = verify.run(verify.build(checked, rest, TARGET), inputs)
    assert all(np.abs(e).max() > 0 for e in expected)
    verify.assert_allclose_by_dtype(got, expected, context="neoflow with the check")


class _CountingModel:
    """The cost model the check uses, counting the kernels it predicts."""

    def __init__(self):
        self.model = KernelCostModel(ZEN4, ZEN4_RATES)
        self.kernels = 0

    def seconds(self, func):
        self.kernels += 1
        return self.model.seconds(func)

    def remembered(self, key, predict):
        return self.model.remembered(key, predict)


def test_a_chain_is_judged_without_the_epilogue_of_its_last_contraction():
    """NeoFlow's greedy search merges the expansion with the depthwise conv while the depthwise
    conv's bias and clip join it one at a time: each step is the same chain with another
    epilogue op, judged by one prediction (the epilogue costs the same in either kernel)."""
    graph = _graph(EXPANSION)
    expansion, depthwise = sorted(_contractions(graph))
    head = list(range(expansion, depthwise))
    counting = _CountingModel()
    check = ProfitabilityCheck(ZEN4, model=counting)
    verdicts = [check.verdict(graph, [head, list(range(depthwise, last + 1))])
                for last in range(depthwise, len(graph.nodes))]
    assert all(v.fused_s is not None for v in verdicts)
    assert len({(v.fused_s, v.parts_s) for v in verdicts}) == 1
    assert counting.kernels == 3  # the chain, the expansion with its epilogue, the depthwise conv
    whole = [node.index for node in graph.nodes]
    chain = check.verdict(graph, [whole[:-1], whole[-1:]])
    assert chain.fused_s is None and "epilogue" in chain.unpredicted


def _squeeze_excite():
    """EfficientNet's squeeze-excite: pool, FC (672 -> 28), SiLU, FC (28 -> 672), sigmoid, scale."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 672, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            rng = np.random.default_rng(0)
            w1 = relax.const(rng.uniform(-0.1, 0.1, (28, 672, 1, 1)).astype("float32"))
            w2 = relax.const(rng.uniform(-0.1, 0.1, (672, 28, 1, 1)).astype("float32"))
            pooled = relax.op.mean(x, axis=[2, 3], keepdims=True)
            squeezed = relax.op.nn.silu(relax.op.nn.conv2d(pooled, w1))
            gate = relax.op.sigmoid(relax.op.nn.conv2d(squeezed, w2))
            y = bb.emit_output(relax.op.multiply(x, gate))
        bb.emit_func_output(y)
    return bb.get()


def test_squeeze_excite_fcs_are_no_chain_group():
    """The first FC computes one row of 28 values: there are no rows to block, so the chain rule's
    tile would only recompute it for every tile of the second FC."""
    graph = _graph(_squeeze_excite())
    first, second = [node.index for node in graph.nodes if node.ptype is PrimitiveType.CONV]
    assert graph.nodes[second].inputs == [first + 1]
    assert not is_chain_group(graph, [node.index for node in graph.nodes if node.index >= first], ZEN4)

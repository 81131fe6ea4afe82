"""The profitability check on CUDA targets (tvm_fusion_ext.cost.gpu_model): a group is predicted
from the rule of the CUDA backend's chain that schedules its kernel, so groups that only
``Fallback`` takes (each output element's whole reduction serial in one thread) are refused where
their parts get dlight's tiled ``Matmul`` or a cross-thread reduction, and groups a reduction
rule takes (a layer-norm chain) are kept. Everything here is predicted, nothing runs on a GPU."""

import math

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.analysis.graph import build_graphs
from tvm_fusion_ext.cost import ProfitabilityCheck, fused_kernel, gpu_model, profitability_for
from tvm_fusion_ext.cost.gpu_model import GPUKernelModel, block_work, scheduling_rule
from tvm_fusion_ext.pipelines import fusion_pipeline, preprocess_passes
from tvm_fusion_ext.tir_passes.flash_attention import FlashAttention
from tvm_fusion_ext.tir_passes.gpu_row_stitch import SharedRowReduction
from tvm_fusion_ext.tir_passes.gpu_rules import chains_contractions, cuda_schedule_rules

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
_rng = np.random.default_rng(1)
W1 = _rng.standard_normal((256, 256)).astype("float32") * 0.05
W2 = _rng.standard_normal((256, 256)).astype("float32") * 0.05
GAMMA = _rng.standard_normal((256,)).astype("float32")
BETA = _rng.standard_normal((256,)).astype("float32")


@I.ir_module
class TwoProjections:
    @R.function
    def main(x: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            a = R.matmul(x, R.const(W1))
            b = R.matmul(a, R.const(W2))
            R.output(b)
        return b


@I.ir_module
class ProjectionLayerNorm:
    @R.function
    def main(x: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            a = R.matmul(x, R.const(W1))
            b = R.nn.layer_norm(a, R.const(GAMMA), R.const(BETA), axes=[-1])
            R.output(b)
        return b


@I.ir_module
class ResidualLayerNorm:
    @R.function
    def main(x: R.Tensor((64, 256), "float32"), r: R.Tensor((64, 256), "float32")):
        with R.dataflow():
            a = R.add(x, r)
            b = R.nn.layer_norm(a, R.const(GAMMA), R.const(BETA), axes=[-1])
            R.output(b)
        return b


@I.ir_module
class ProjectionToHeads:
    """ViT's query projection and its split into heads: 197 tokens, not a multiple of Matmul's
    64-row tile, so Matmul declines the matmul with the head transpose in its epilogue."""

    @R.function
    def main(x: R.Tensor((197, 256), "float32")):
        with R.dataflow():
            a = R.matmul(x, R.const(W1))
            b = R.reshape(a, (197, 4, 64))
            c = R.permute_dims(b, (1, 0, 2))
            R.output(c)
        return c


W_PROJECT = _rng.standard_normal((96, 576, 1, 1)).astype("float32") * 0.05
W_EXPAND = _rng.standard_normal((576, 96, 1, 1)).astype("float32") * 0.05


@I.ir_module
class ProjectionThenExpansion:
    """MobileNetV2's projection conv, its residual add, and the next block's expansion conv with
    ReLU6, as NeoFlow groups them."""

    @R.function
    def main(x: R.Tensor((1, 576, 2, 2), "float32"), r: R.Tensor((1, 96, 2, 2), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, R.const(W_PROJECT))
            b = R.add(a, r)
            c = R.nn.conv2d(b, R.const(W_EXPAND))
            d = R.clip(c, 0, 6)
            R.output(d)
        return d


def _graph(mod):
    with CUDA:
        return build_graphs(tvm.transform.Sequential(preprocess_passes())(mod))[0]


def _rule(graph, group):
    rule, _ = scheduling_rule(fused_kernel(graph, group), CUDA)
    return type(rule)


def test_cuda_targets_get_the_gpu_model():
    check = profitability_for(CUDA)
    assert isinstance(check, ProfitabilityCheck) and isinstance(check.model, GPUKernelModel)
    assert profitability_for(CUDA, enabled=False) is None


def test_the_backend_and_the_check_share_one_rule_chain():
    from tvm_fusion_ext.backends.cuda import CUDABackend

    (apply,) = [p for p in CUDABackend().schedule_passes(CUDA, "untuned")
                if isinstance(p, dl.ApplyDefaultSchedule)]
    assert [type(r) for r in apply.rules] == [type(r) for r in cuda_schedule_rules()]


ROW_RULES = (SharedRowReduction, dl.gpu.GeneralReduction)


@pytest.mark.parametrize(("mod", "second"), [(TwoProjections, (dl.gpu.Matmul,)), (ProjectionLayerNorm, ROW_RULES)],
                         ids=["two_matmuls", "matmul_layer_norm"])
def test_a_group_only_fallback_takes_is_refused_where_its_parts_get_good_rules(mod, second):
    graph = _graph(mod)
    assert _rule(graph, [0]) is dl.gpu.Matmul and _rule(graph, [1]) in second
    assert _rule(graph, [0, 1]) is dl.gpu.Fallback
    verdict = profitability_for(CUDA).verdict(graph, [[0], [1]])
    assert not verdict.profitable and verdict.fused_s > 2 * verdict.parts_s, verdict.describe()


def test_a_layer_norm_chain_a_reduction_rule_takes_is_accepted():
    graph = _graph(ResidualLayerNorm)
    assert _rule(graph, [0, 1]) in ROW_RULES
    verdict = profitability_for(CUDA).verdict(graph, [[0], [1]])
    assert verdict.profitable and verdict.gain_s > 0, verdict.describe()


def test_a_matmul_with_a_block_per_output_element_is_refused():
    """``GeneralReduction`` gives each of the 50 432 output elements a block of its own: predicted
    in waves of blocks, far above the tiled matmul and its transpose apart (ViT under APOLLO ran
    at 0.25x of ``stock`` on an H200 with such kernels)."""
    graph = _graph(ProjectionToHeads)
    assert _rule(graph, [0]) is dl.gpu.Matmul and _rule(graph, [0, 1, 2]) is dl.gpu.GeneralReduction
    verdict = profitability_for(CUDA).verdict(graph, [[0], [1, 2]])
    assert not verdict.profitable and verdict.fused_s > 2 * verdict.parts_s, verdict.describe()
    spec = GPUKernelModel(CUDA).spec
    assert gpu_model.block_per_output_seconds(197, 256, spec) < 2e-6  # a layer norm's rows: one wave


def test_two_convs_in_one_kernel_are_left_to_fallback_and_refused():
    """``GeneralReduction`` would compute the projection conv again in every output element's
    block of the expansion conv (``chains_contractions``): the chain leaves the kernel to
    ``Fallback``, and the check refuses it against the two convs under ``Matmul``."""
    graph = _graph(ProjectionThenExpansion)
    assert chains_contractions(fused_kernel(graph, [0, 1, 2, 3]))
    assert _rule(graph, [0, 1, 2, 3]) is dl.gpu.Fallback
    verdict = profitability_for(CUDA).verdict(graph, [[0, 1], [2, 3]])
    assert not verdict.profitable, verdict.describe()


def test_a_serial_reduction_costs_its_steps_and_a_tiled_one_its_flops():
    """The same two-matmul kernel under ``Fallback`` against one matmul under ``Matmul``: the
    serial prediction grows with the reduction length, the tiled one with the flops only."""
    graph = _graph(TwoProjections)
    model = GPUKernelModel(CUDA)
    _, reductions = block_work(fused_kernel(graph, [0, 1]))
    assert [(ops, outputs, length) for ops, outputs, length in reductions] == [
        (64 * 256 * 256 * 2, 64 * 256, 256)] * 2
    spec = model.spec
    serial_floor = 2 * 256 * gpu_model.SERIAL_STEP_CYCLES / spec.clock_hz  # 2 reductions, 256 steps, 1 wave
    assert model.seconds(fused_kernel(graph, [0, 1])) >= serial_floor
    assert model.seconds(fused_kernel(graph, [0])) < serial_floor / 2


class _Raising(dl.ScheduleRule):
    def apply(self, func, target, tunable):
        raise tvm.TVMError("the rule fails on this kernel")


def test_a_kernel_the_chain_fails_on_is_predicted_infinite(monkeypatch):
    """A rule that raises (not declines) would fail the backend's ``ApplyDefaultSchedule`` too:
    no kernel can be built, so the group is never formed."""
    kernel = fused_kernel(_graph(TwoProjections), [0, 1])
    assert math.isfinite(GPUKernelModel(CUDA).seconds(kernel))
    monkeypatch.setattr(gpu_model, "cuda_schedule_rules", lambda: (_Raising(), dl.gpu.Fallback()))
    assert scheduling_rule(kernel, CUDA)[0] is None
    assert math.isinf(GPUKernelModel(CUDA).seconds(kernel))


# ---- the strategies on zoo models -------------------------------------------------------------------
def _zoo_kernels(name: str, args: dict, strategy: str, cost_check: bool) -> list:
    pytest.importorskip("torch")
    from tvm_fusion_ext import zoo

    mod = zoo.load(name, args).relax("torch")
    with CUDA:
        grouped = fusion_pipeline(strategy, CUDA, cost_check)(mod)
        fused = tvm.transform.Sequential([relax.transform.FuseTIR(),
                                          relax.transform.DeadCodeElimination()])(grouped)
    return [f for _, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _rules(kernels) -> list:
    return [type(scheduling_rule(f, CUDA)[0]) for f in kernels]


def _serial(kernels) -> list:
    """Kernels with a reduction that only ``Fallback`` schedules."""
    return [f for f, rule in zip(kernels, _rules(kernels)) if rule is dl.gpu.Fallback and block_work(f)[1]]


@pytest.mark.zoo
@pytest.mark.parametrize("strategy", ["apollo", "neoflow"])
def test_multi_head_reductions_keep_their_cross_thread_rules_with_the_check(strategy):
    """APOLLO's Fig. 6(a) case at the benchmarks' size (64 rows of 1024). Without the check both
    papers make it one kernel, whose two row reductions ``Fallback`` runs serially (0.38x stock
    on the H100); with it no kernel reduces serially, and there are no more kernels than stock's."""
    (paper,) = _zoo_kernels("multi_head", {}, strategy, cost_check=False)
    assert _serial([paper])
    checked = _zoo_kernels("multi_head", {}, strategy, cost_check=True)
    assert not _serial(checked) and len(checked) <= len(_zoo_kernels("multi_head", {}, "stock", True))
    model = GPUKernelModel(CUDA)
    assert sum(map(model.seconds, checked)) < model.seconds(paper) / 3


@pytest.mark.zoo
def test_neoflow_on_bert_keeps_flash_attention_and_drops_serial_reductions():
    """NeoFlow's greedy merges reach BERT's attention through ``Fallback`` kernels; the check
    lets them through (the attention group), while the matmul + layer norm and the QKV
    projection with its slices, which ``Fallback`` would run serially, are kept apart."""
    args = {"seq": 16, "layers": 1}
    paper = _zoo_kernels("bert_base", args, "neoflow", cost_check=False)
    assert FlashAttention in _rules(paper) and _serial(paper)
    checked = _zoo_kernels("bert_base", args, "neoflow", cost_check=True)
    assert FlashAttention in _rules(checked) and not _serial(checked)

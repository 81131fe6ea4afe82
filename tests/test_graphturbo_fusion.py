"""The ``graphturbo`` strategy end to end: sub-graphs become kernels and match the unfused module."""

import pytest
import tvm

import tvm_fusion_ext  # noqa: F401  (registers graphturbo)
from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import fusion_pipeline, preprocess_passes
from tvm_fusion_ext.relax_passes.graphturbo_fusion import GraphTurboFusion
from tvm_fusion_ext.testing.verify import assert_same_as_unfused, count_kernels


@pytest.fixture(scope="module")
def stage():
    """GraphTurbo Fig. 3(a): one ResNet stage with 2x down-sampling (two blocks)."""
    return zoo.load("resnet_stage", {"image": 16, "channels": 16}).relax("torch")


def test_stage_is_one_kernel_on_llvm_and_matches_unfused(stage):
    target = tvm.target.Target("llvm")
    with target:
        fused = fusion_pipeline("graphturbo", target)(stage)
    assert count_kernels(fused) == 1  # Fig. 5: conv block + identity block in one sub-graph
    assert assert_same_as_unfused(stage, "graphturbo") < 1e-4


def test_small_lb_cuts_the_stage_and_plans_instances(stage):
    pre = tvm.transform.Sequential(preprocess_passes())(stage)
    fusion = GraphTurboFusion(lb_bytes=4 * 1024, cores=8)
    with tvm.target.Target("llvm"):
        out = fusion(pre)
    plan = fusion.plans[0]
    fused = [g for g in plan.grouping.groups if len(g) > 1]
    assert fused and sum(len(g) for g in fused) > len(fused)
    factors = {s.factor for s in plan.grouping.best if s is not None}
    assert max(factors) > 1  # 8 KB tensors cannot stay whole in a 4 KB LB
    assert sorted(plan.order) == list(range(len(plan.instances.instances)))
    assert plan.order_kind in ("bfs", "dfs") and set(plan.binding.scope.values()) <= {"LB", "GB"}
    assert out is not pre


def test_stage_on_dsa_matches_unfused(stage):
    assert assert_same_as_unfused(stage, "graphturbo", target="dsa/stcp920") < 1e-4

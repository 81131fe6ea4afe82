"""Training steps (forward + backward + SGD update, via relax.transform.Gradient) under each fusion
strategy give the unfused run's losses; the forward/backward coupling is judged by the reward."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fusion_ext.driver.training import lltm_loss, mlp_loss, train, training_step
from tvm_fusion_ext.hardware.device_costs import DeviceCosts
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.relax_passes.neoflow_fusion import NeoFlowFusion
from tvm_fusion_ext.testing.verify import kernel_traffic

STEPS = 5
COSTS = DeviceCosts(bandwidth=10e9, flops=20e9, launch=5e-6)


def test_training_step_is_one_block():
    problem = mlp_loss()
    step = training_step(problem.loss_module, num_inputs=2, learning_rate=0.1)
    main = step["main"]
    assert list(step.get_global_vars()) == [step.get_global_var("main")]
    assert len(main.body.blocks) == 1 and isinstance(main.body.blocks[0], relax.DataflowBlock)
    assert len(main.params) == 6 and len(main.ret_ty.fields) == 5  # loss + 4 new parameters


@pytest.mark.parametrize("make, num_inputs", [(mlp_loss, 2), (lltm_loss, 4)], ids=["mlp", "lltm"])
def test_losses_match_unfused(make, num_inputs):
    problem = make()
    step = training_step(problem.loss_module, num_inputs, learning_rate=0.1)
    expected = train(step, problem, STEPS, "none", policy="unscheduled")
    assert expected[-1] < expected[0]  # it trains
    for fusion in ("stock", "neoflow"):
        np.testing.assert_allclose(train(step, problem, STEPS, fusion), expected, rtol=1e-5,
                                   err_msg=fusion)


def test_coupled_tensor_recomputed_in_backward():
    """LLTM: concat(h, x) feeds the forward matmul and (transposed) the weight gradient. The reward
    prefers recomputing the concat in the backward kernel over storing it for the backward pass."""
    problem = lltm_loss(batch=32, input_features=128, state_size=256)
    step = training_step(problem.loss_module, 4, learning_rate=0.01)
    with tvm.target.Target("llvm"):
        pre = tvm.transform.Sequential(preprocess_passes())(step)
        # Eq. (4) with the given Pd/Pc/L, as written (no cost check)
        with_recompute = NeoFlowFusion(COSTS, cost_check=False)
        fused = tvm.transform.Sequential([with_recompute, relax.transform.FuseTIR()])(pre)
        without = NeoFlowFusion(COSTS, recompute=False, cost_check=False)
        kept = tvm.transform.Sequential([without, relax.transform.FuseTIR()])(pre)
    assert with_recompute.recomputed == ["lv"] and without.recomputed == []
    assert kernel_traffic(fused).kernels == kernel_traffic(kept).kernels == 2
    assert kernel_traffic(fused).boundary_bytes < kernel_traffic(kept).boundary_bytes
    # the forward matmul and the weight-gradient matmul never share a kernel (Many + Many)
    assert all(not ({"lv1", "w_adjoint"} <= set(names)) for _, names in with_recompute.merges)


def test_each_block_is_searched_once_unless_recomputation_rewrites_it(monkeypatch):
    """The recomputation phase's greedy search is reused for a block it leaves as it was (MLP
    inference: nothing to recompute), and the block it rewrites (LLTM's training step) is
    searched again; the merges reported are those of the searches the partition came from."""
    from tvm_fusion_ext.partitioners.neoflow import GreedyRewardPartitioner

    searches = []
    search = GreedyRewardPartitioner.__call__
    monkeypatch.setattr(GreedyRewardPartitioner, "__call__",
                        lambda self, graph: searches.append(graph) or search(self, graph))
    with tvm.target.Target("llvm"):
        inference = tvm.transform.Sequential(preprocess_passes())(mlp_loss().loss_module)
        reused, alone = NeoFlowFusion(COSTS, cost_check=False), NeoFlowFusion(COSTS, recompute=False, cost_check=False)
        tvm.ir.assert_structural_equal(reused(inference), alone(inference))
        assert len(searches) == 2 and reused.merges == alone.merges and reused.recomputed == []
        searches.clear()
        problem = lltm_loss(batch=32, input_features=128, state_size=256)
        step = tvm.transform.Sequential(preprocess_passes())(training_step(problem.loss_module, 4, learning_rate=0.01))
        rewritten = NeoFlowFusion(COSTS, cost_check=False)
        rewritten(step)
    assert rewritten.recomputed == ["lv"] and len(searches) == 2

"""FuseOpsDominator as a pass: parity with stock FuseOps, the FuseOps contract, backward/both numerics."""

import os
import subprocess
import sys

import pytest
import tvm
import tvm_ffi
from cases import foundation
from tvm import relax

from tvm_fusion_ext.analysis.graph import build_graphs
from tvm_fusion_ext.partitioners.dominator import dominator_groups
from tvm_fusion_ext.pipelines import fusion_names
from tvm_fusion_ext.relax_passes.fuse_ops_dominator import FuseOpsDominator
from tvm_fusion_ext.testing.verify import assert_same_as_unfused, kernel_traffic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {"conv_bias_relu_softmax": foundation.ConvBiasReluSoftmax, "diamond": foundation.Diamond,
         "split_multi_output": foundation.SplitMultiOutput, "concat_of_tuple": foundation.ConcatOfTuple,
         "with_constants": foundation.WithConstants, "matmul_chain": foundation.MatmulChain,
         "two_chains": foundation.TwoChains, "symbolic_shape": foundation.SymbolicShape,
         "with_packed_call": foundation.WithPackedCall, "with_inplace_call": foundation.WithInplaceCall}


def _legalize(mod):
    return relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(mod))


@pytest.mark.parametrize("case", list(CASES))
def test_forward_is_stock_fuse_ops(case):
    mod = _legalize(CASES[case])
    ours, stock = FuseOpsDominator()(mod), relax.transform.FuseOps()(mod)
    tvm.ir.assert_structural_equal(ours, stock)
    tvm.ir.assert_structural_equal(relax.transform.FuseTIR()(ours), relax.transform.FuseTIR()(stock))


@pytest.mark.parametrize("case", list(CASES))
def test_both_never_has_more_kernels_than_forward(case):
    mod = _legalize(CASES[case])
    kernels = {d: kernel_traffic(relax.transform.FuseTIR()(FuseOpsDominator(direction=d)(mod))).kernels
               for d in ("forward", "backward", "both")}
    assert kernels["both"] <= kernels["forward"]
    for graph in build_graphs(mod):
        for direction in ("backward", "both"):
            assert all(graph.group_is_convex(g) for g in dominator_groups(graph, direction))


@pytest.mark.parametrize("direction", ["backward", "both"])
@pytest.mark.parametrize("case", ["conv_bias_relu_softmax", "split_multi_output", "concat_of_tuple"])
def test_backward_and_both_compute_the_same(case, direction):
    assert_same_as_unfused(CASES[case], f"dominator-{direction}")


def test_fuse_opt_level_zero_and_pass_context_opt_level():
    mod = _legalize(foundation.ConvBiasReluSoftmax)
    tvm.ir.assert_structural_equal(FuseOpsDominator(0)(mod), mod)
    with tvm.transform.PassContext(opt_level=0):
        tvm.ir.assert_structural_equal(FuseOpsDominator()(mod), mod)
        explicit = FuseOpsDominator(2)(mod)
    tvm.ir.assert_structural_equal(explicit, relax.transform.FuseOps(2)(mod))
    assert not tvm_ffi.structural_equal(explicit, mod)


def test_max_depth_comes_from_the_pass_context():
    mod = _legalize(foundation.ConvBiasReluSoftmax)
    with tvm.transform.PassContext(config={"relax.FuseOps.max_depth": 2}):
        ours, stock = FuseOpsDominator()(mod), relax.transform.FuseOps()(mod)
    tvm.ir.assert_structural_equal(ours, stock)
    assert not tvm_ffi.structural_equal(ours, FuseOpsDominator()(mod))
    tvm.ir.assert_structural_equal(FuseOpsDominator(max_depth=2)(mod), ours)


def test_primitive_functions_are_left_alone():
    fused = FuseOpsDominator()(_legalize(foundation.ConvBiasReluSoftmax))
    tvm.ir.assert_structural_equal(FuseOpsDominator(direction="both")(fused), fused)


def test_registered_pass_and_strategies():
    make = tvm.get_global_func("tvm_fusion_ext.FuseOpsDominator")
    mod = _legalize(foundation.Diamond)
    tvm.ir.assert_structural_equal(make(-1, "forward")(mod), relax.transform.FuseOps()(mod))
    assert {"dominator-forward", "dominator-backward", "dominator-both"} <= set(fusion_names())
    with pytest.raises(ValueError, match="direction"):
        FuseOpsDominator(direction="sideways")


@pytest.mark.skipif(not os.path.isfile(os.environ.get("TVM_FUSE_OPS_TESTS", "")),
                    reason="set TVM_FUSE_OPS_TESTS to apache/tvm's tests/python/relax/test_transform_fuse_ops.py")
def test_tvm_fuse_ops_tests_pass_with_fuse_ops_dominator():
    script = os.path.join(REPO, "scripts", "run_tvm_fuse_ops_tests.py")
    result = subprocess.run([sys.executable, script, os.environ["TVM_FUSE_OPS_TESTS"]],
                            check=False, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "25 passed" in result.stdout



def test_backward_epilogues_can_be_switched_off():
    """``backward_epilogues=False`` gives the mirrored rules alone: the matmul's bias and ReLU stay
    out of its kernel, which backward fusion with the epilogue rule takes in, as forward does."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    w = relax.Var("w", relax.TensorType((16, 32), "float32"))
    b = relax.Var("b", relax.TensorType((32,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w), b)))
        bb.emit_func_output(out)
    mod = _legalize(bb.get())

    def kernels(**kwargs):
        fused = FuseOpsDominator(direction="backward", cost_check=False, **kwargs)(mod)
        return kernel_traffic(relax.transform.FuseTIR()(fused)).kernels

    assert (kernels(), kernels(backward_epilogues=False)) == (1, 2)
    assert kernels() == kernel_traffic(relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))).kernels

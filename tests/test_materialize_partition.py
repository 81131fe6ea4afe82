"""The shared partition materialiser: any partition -> Primitive functions -> FuseTIR kernels."""

import numpy as np
import pytest
import tvm
from cases import foundation
from tvm import relax

from tvm_fusion_ext.analysis.graph import build_graph
from tvm_fusion_ext.relax_passes.materialize_partition import (
    MaterializePartition,
    PartitionError,
    group_by_names,
)
from tvm_fusion_ext.testing import verify
from tvm_fusion_ext.testing.stock_groups import stock_fuseops_partitioner

PARITY_CASES = ["ConvBiasReluSoftmax", "Diamond", "SplitMultiOutput", "ConcatOfTuple",
                "WithConstants", "SymbolicShape", "WithPackedCall", "MatmulChain", "WithInplaceCall"]


def _legalize(mod):
    return tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                     relax.transform.AnnotateTIROpPattern()])(mod)


def _fuse(mod, *groups):
    grouped = MaterializePartition(group_by_names(*groups))(_legalize(mod))
    assert relax.analysis.check_well_formed(grouped)
    fused = relax.transform.FuseTIR()(grouped)
    assert relax.analysis.check_well_formed(fused)
    return grouped, fused


def _prim_funcs(mod):
    return sorted(gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def _assert_runs_like_unfused(mod, fused):
    inputs = verify.random_inputs(mod["main"], seed=3)
    expected = verify.run(verify.build(mod, "none", policy="unscheduled"), inputs)
    actual = verify.run(tvm.compile(fused, "llvm"), inputs)
    verify.assert_allclose_by_dtype(actual, expected)


def test_hand_chosen_partition_gives_one_prim_func_per_group():
    grouped, fused = _fuse(foundation.ConvBiasReluSoftmax, ["c", "a"], ["r", "s"])
    assert sorted(gv.name_hint for gv, f in grouped.functions_items()
                  if isinstance(f, relax.Function) and f.attrs and f.attrs.get("Primitive")) == \
        ["fused_conv2d_add", "fused_relu_softmax"]
    assert _prim_funcs(fused) == ["fused_conv2d_add", "fused_relu_softmax"]
    assert verify.count_kernels(fused) == 2
    _assert_runs_like_unfused(foundation.ConvBiasReluSoftmax, fused)


def test_multi_output_group_returns_a_tuple():
    grouped, fused = _fuse(foundation.SplitMultiOutput, ["r", "parts", "p0", "p1", "s"])
    group = grouped["fused_relu_split_add"]
    assert isinstance(group.ret_ty, relax.TupleType) and len(group.ret_ty.fields) == 2  # s and p0
    assert _prim_funcs(fused) == ["fused_relu_split_add", "multiply"]
    _assert_runs_like_unfused(foundation.SplitMultiOutput, fused)


def test_constants_are_lifted_to_parameters():
    grouped, fused = _fuse(foundation.WithConstants, ["a", "b", "c"])
    group = grouped["fused_add_multiply_relu"]
    assert [p.name for p in group.params] == ["x", "param_0", "param_1"]
    _assert_runs_like_unfused(foundation.WithConstants, fused)


def test_symbolic_shapes_compile_and_run():
    _, fused = _fuse(foundation.SymbolicShape, ["a", "b", "c"])
    assert _prim_funcs(fused) == ["fused_add_tir_exp_relu"]
    x = np.random.default_rng(0).uniform(-1, 1, (5, 8)).astype("float32")
    w = np.random.default_rng(1).uniform(-1, 1, (8,)).astype("float32")
    (out,) = verify.run(tvm.compile(fused, "llvm"), [x, w])
    np.testing.assert_allclose(out, np.maximum(np.exp(x + w), 0), rtol=1e-5)


def test_in_place_calls_are_grouped():
    _, fused = _fuse(foundation.WithInplaceCall, ["e", "s", "r"])
    assert verify.count_kernels(fused) == 1
    _assert_runs_like_unfused(foundation.WithInplaceCall, fused)


def test_packed_calls_are_left_alone():
    with pytest.raises(PartitionError, match="cannot be part of a fused function"):
        _fuse(foundation.WithPackedCall, ["a", "p"])
    grouped, _ = _fuse(foundation.WithPackedCall, ["b", "c"])
    script = grouped["main"].script()
    assert "call_dps_packed" in script and "fused_relu_add" in script


def test_cyclic_partition_is_refused():
    # {e, j} without left/right: e -> left -> j leaves the group and comes back.
    with pytest.raises(PartitionError, match="cycle"):
        _fuse(foundation.Diamond, ["e", "j"])


def test_groups_depending_on_each_other_are_refused():
    # {a, b} and {d, c} are each convex, but a -> c and d -> b make them depend on each other.
    mod = _legalize(foundation.TwoChains)
    graph = build_graph(mod)
    a, d, c, b = (graph.index_of(n) for n in ("a", "d", "c", "b"))
    assert graph.group_is_convex([a, b]) and graph.group_is_convex([d, c])
    with pytest.raises(PartitionError, match="depend on each other"):
        MaterializePartition(lambda g: [[a, b], [d, c]])(mod)


def test_overlapping_partition_is_refused():
    with pytest.raises(PartitionError, match="named twice"):
        _fuse(foundation.Diamond, ["e", "left"], ["left", "right"])


def test_unknown_binding_is_refused():
    mod = _legalize(foundation.Diamond)
    with pytest.raises(PartitionError, match="not in the block"):
        MaterializePartition(lambda g: [[0, 99]])(mod)


def test_empty_partition_leaves_the_module_unchanged():
    mod = _legalize(foundation.Diamond)
    tvm.ir.assert_structural_equal(MaterializePartition(lambda g: [])(mod), mod)


@pytest.mark.parametrize("case", PARITY_CASES)
def test_reproduces_stock_fuse_ops_from_its_own_grouping(case):
    mod = _legalize(getattr(foundation, case))
    ours = MaterializePartition(stock_fuseops_partitioner(mod))(mod)
    stock = relax.transform.FuseOps()(mod)
    tvm.ir.assert_structural_equal(ours, stock)
    tvm.ir.assert_structural_equal(relax.transform.FuseTIR()(ours), relax.transform.FuseTIR()(stock))

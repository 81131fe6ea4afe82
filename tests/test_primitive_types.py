"""APOLLO primitive types (section 3.3, Definitions 1-4) of legalized ops, read off TIR index maps."""

import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.analysis.primitive_types import PrimitiveType, Relation, classify_prim_func


@I.ir_module
class ManyOps:
    @R.function
    def main(x: R.Tensor((2, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
             bias: R.Tensor((1, 4, 1, 1), "float32"), idx: R.Tensor((2,), "int64"),
             m: R.Tensor((16, 32), "float32"), n: R.Tensor((32, 8), "float32"),
             v: R.Tensor((32,), "float32")):
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=1)
            add_bias = R.add(conv, bias)
            relu = R.nn.relu(add_bias)
            softmax = R.nn.softmax(relu, axis=1)
            take = R.take(m, idx, axis=0)
            reshape = R.reshape(m, (32, 16))
            transpose = R.permute_dims(m, [1, 0])
            matmul = R.matmul(m, n)
            total = R.sum(m, axis=1)
            exp = R.exp(m)
            bcast = R.broadcast_to(v, (16, 32))
            ln = R.nn.layer_norm(m, v, v, axes=[-1])
            pool = R.nn.max_pool2d(x, (2, 2), strides=(2, 2))
            R.output(softmax, take, reshape, transpose, matmul, total, exp, bcast, ln, pool)
        return (softmax, take, reshape, transpose, matmul, total, exp, bcast, ln, pool)


@pytest.fixture(scope="module")
def legalized():
    mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(ManyOps))
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("callee, expected", [
    ("relu", PrimitiveType.ELEMENTWISE),
    ("tir_exp", PrimitiveType.ELEMENTWISE),
    ("add", PrimitiveType.BROADCAST),  # bias add: APOLLO broadcast, TVM kElemWise
    ("broadcast_to", PrimitiveType.BROADCAST),
    ("sum", PrimitiveType.REDUCTION),
    ("softmax", PrimitiveType.REDUCTION),
    ("layer_norm", PrimitiveType.REDUCTION),
    ("transpose", PrimitiveType.TRANSPOSE),
    ("reshape", PrimitiveType.OPAQUE),
    ("matmul", PrimitiveType.MATMUL),
    ("conv2d", PrimitiveType.CONV),
    ("take", PrimitiveType.OPAQUE),
    ("max_pool2d", PrimitiveType.OPAQUE),
])
def test_op_type(legalized, callee, expected):
    assert classify_prim_func(legalized[callee]).ptype is expected


def test_bias_add_is_broadcast_for_apollo_but_elemwise_for_tvm(legalized):
    func = legalized["add"]
    assert int(func.attrs["op_pattern"]) == 0  # kElemWise
    (block,) = classify_prim_func(func).blocks
    assert block.relations == (Relation.BIJECTIVE, Relation.INJECTIVE)


def test_compound_ops_expose_each_block(legalized):
    softmax = classify_prim_func(legalized["softmax"])
    assert softmax.is_compound
    assert [b.ptype for b in softmax.blocks] == [
        PrimitiveType.REDUCTION, PrimitiveType.BROADCAST, PrimitiveType.REDUCTION,
        PrimitiveType.BROADCAST]
    conv = classify_prim_func(legalized["conv2d"])
    assert [b.ptype for b in conv.blocks] == [PrimitiveType.OPAQUE, PrimitiveType.CONV]  # pad, conv


def test_reduction_relation_is_surjective(legalized):
    (block,) = classify_prim_func(legalized["sum"]).blocks
    assert block.relations == (Relation.SURJECTIVE,)


def test_flops_count_the_iteration_space(legalized):
    # 16x8 outputs, each a multiply-add over 32 -> 16*8*32 iterations, 2 arithmetic ops each.
    assert classify_prim_func(legalized["matmul"]).flops == 16 * 8 * 32 * 2


def test_opaque_subkinds_are_opaque():
    assert all(t.is_opaque for t in (PrimitiveType.TRANSPOSE, PrimitiveType.MATMUL,
                                     PrimitiveType.CONV, PrimitiveType.OPAQUE))
    assert not PrimitiveType.REDUCTION.is_opaque

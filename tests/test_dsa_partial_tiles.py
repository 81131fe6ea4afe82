"""Matrix-unit tiles the instruction shape does not divide (tvm_fusion_ext/target_dsa/
partial_tiles.py): the work a partial instruction does, the blocks a partition leaves, and the
numbers a compiled kernel gives on the host."""

import pytest
import tvm
import tvm_ffi
from dsa_cases.matrix_unit import conv_relu, unit_busy_matching_llvm
from tvm import relax
from tvm.script import tirx as T

import tvm_fusion_ext  # noqa: F401
from tvm_fusion_ext.target_dsa.intrinsics import tensorize_func
from tvm_fusion_ext.target_dsa.kernel_model import kernel_model
from tvm_fusion_ext.target_dsa.partial_tiles import (
    instruction_shape,
    matrix_efficiency,
    outruns_vector_mac,
)
from tvm_fusion_ext.target_dsa.spec import PRESETS

STCP920 = PRESETS["stcp920"]


def test_a_partial_instruction_does_the_fraction_of_the_work_it_covers():
    # 197 rows take 13 instructions of 16 rows: 197 / 208 of their work.
    assert matrix_efficiency((197, 16, 32), (16, 16, 16)) == pytest.approx(197 / 208)
    # A convolution's 14 columns fill 14 of the unit's 16 (the instruction costs a whole one).
    assert matrix_efficiency((16, 28, 16), (16, 14, 16), (16, 16, 16)) == pytest.approx(14 / 16)
    assert instruction_shape((192, 5, 24), (16, 16, 16)) == (16, 5, 24)
    # The 256-wide matrix unit outruns the 64-wide VME above a quarter of its work: a
    # reduction over 8 of 16 steps does, a 3-channel stem (3 / 16) does not.
    assert outruns_vector_mac((16, 16, 8), (16, 16, 16), STCP920)
    assert not outruns_vector_mac((16, 16, 3), (16, 16, 16), STCP920)


@T.prim_func(s_tir=True)
def _ragged_gemm(A: T.Buffer((37, 24), "float32"), B: T.Buffer((24, 40), "float32"),
                 C: T.Buffer((37, 40), "float32")):
    A_lb = T.sblock_alloc_buffer((37, 24), "float32", scope="local.dsa_lb")
    B_lb = T.sblock_alloc_buffer((24, 40), "float32", scope="local.dsa_lb")
    C_lb = T.sblock_alloc_buffer((37, 40), "float32", scope="local.dsa_lb")
    for i, k in T.grid(37, 24):
        with T.sblock("A_lb"):
            vi, vk = T.axis.remap("SS", [i, k])
            A_lb[vi, vk] = A[vi, vk]
    for k, j in T.grid(24, 40):
        with T.sblock("B_lb"):
            vk, vj = T.axis.remap("SS", [k, j])
            B_lb[vk, vj] = B[vk, vj]
    for i, j, k in T.grid(37, 40, 24):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C_lb[vi, vj] = T.float32(0)
            C_lb[vi, vj] = C_lb[vi, vj] + A_lb[vi, vk] * B_lb[vk, vj]
    for i, j in T.grid(37, 40):
        with T.sblock("C_lb"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = C_lb[vi, vj]


def test_a_gemm_of_ragged_extents_becomes_full_and_partial_instructions():
    # 37 x 40 x 24 over 16 x 16 x 16: rows 32 + 5, columns 32 + 8, reduction 16 + 8, so eight
    # blocks, each one instruction shape; every instruction counts as a whole one.
    func = tensorize_func(_ragged_gemm.with_attr("global_symbol", "main"), STCP920, windows=False)
    calls = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, calls.append)])
    shapes = sorted({tuple(int(a) for a in c.args[-3:]) for c in calls
                     if getattr(c.op, "name", "") == "tirx.call_extern"})
    assert shapes == sorted({(m, n, k) for m in (16, 5) for n in (16, 8) for k in (16, 8)})
    compute = [e for p in kernel_model(func)["phases"] for e in p["events"]
               if e.get("unit_kind") == "matrix"]
    assert sum(e["calls"] for e in compute) == 3 * 3 * 2  # ceil(37/16) x ceil(40/16) x ceil(24/16)


def _batched_dense(rows: int, features: int) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, rows, features), "float32"))
    w = relax.Var("w", relax.TensorType((features, features), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.matmul(x, w)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("mod", [_batched_dense(197, 64), conv_relu((2, 40, 14, 14), 24, 1)],
                         ids=["vit-rows", "conv-24"])
def test_a_partial_tile_on_the_matrix_unit_computes_the_reference(mod):
    # A ViT-like 197-row GEMM per instance and a 24-channel 1x1 convolution (rows 16 + 8): no
    # extent is a multiple of the instruction, and the matrix unit takes them anyway.
    assert unit_busy_matching_llvm(mod, "graphturbo")["mme"] > 0

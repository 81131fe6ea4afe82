"""The default schedule on extents no vector-lane multiple divides (ViT's 197 tokens): contractions
are padded to lane multiples and register-tiled, element-wise loops are vectorised with a scalar
tail, and row tiles are balanced over the cores; the results stay exact."""

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.tir_passes import DefaultSchedule
from tvm_fusion_ext.tir_passes.vectorize import PARTITION_HINT

AVX2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024, vector_registers=16,
               l1_bytes=32 * 1024, l2_bytes=512 * 1024)
HEADS, TOKENS, HEAD_DIM = 3, 197, 64


def _attention_scores():
    """``softmax(q kᵀ / 8)`` of ViT-Ti's 3 heads, legalized, one PrimFunc per op."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((1, HEADS, TOKENS, HEAD_DIM), "float32"))
    k = relax.Var("k", relax.TensorType((1, HEADS, HEAD_DIM, TOKENS), "float32"))
    with bb.function("main", [q, k]):
        with bb.dataflow():
            scores = bb.emit(relax.op.matmul(q, k))
            out = bb.emit_output(relax.op.nn.softmax(relax.op.divide(scores, relax.const(8.0)), axis=-1))
        bb.emit_func_output(out)
    return relax.transform.LegalizeOps()(bb.get())


def _loops(func):
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    return loops


def _prim_func(mod, name):
    return next(f for gv, f in mod.functions_items() if gv.name_hint == name)


def test_scores_matmul_is_padded_to_lane_multiples_and_register_tiled():
    out = DefaultSchedule("llvm", AVX2)(_attention_scores())
    matmul = _prim_func(out, "matmul")
    script = matmul.script()
    assert "pad_einsum" not in script and "matmul_pad" in script
    buffers = {b.name: [int(x) for x in b.shape] for b in matmul.body.block.alloc_buffers}
    assert buffers["matmul_pad"] == [1, HEADS, 200, 200]   # 197 -> 25 vectors of 8 lanes
    vectorized = [loop for loop in _loops(matmul) if loop.kind == tirx.ForKind.VECTORIZED]
    unrolled = [loop for loop in _loops(matmul) if loop.kind == tirx.ForKind.UNROLLED]
    assert vectorized and unrolled                          # a register micro-kernel


def test_softmax_rows_are_vectorised_with_a_tail_and_balanced_over_the_cores():
    out = DefaultSchedule("llvm", AVX2)(_attention_scores())
    softmax = _prim_func(out, "softmax")
    loops = _loops(softmax)
    parallel = [loop for loop in loops if loop.kind == tirx.ForKind.PARALLEL]
    assert [int(loop.extent) for loop in parallel] == [HEADS * TOKENS]   # not 3 tiles on 2 cores
    hinted = [loop for loop in loops if PARTITION_HINT in loop.annotations]
    assert hinted and all(int(loop.extent) == 25 for loop in hinted)   # ceil(197 / 8)


def test_padded_and_tail_vectorised_kernels_compute_the_same_numbers():
    mod = _attention_scores()
    target = tvm.target.Target("llvm")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, HEADS, TOKENS, HEAD_DIM)).astype("float32")
    k = rng.standard_normal((1, HEADS, HEAD_DIM, TOKENS)).astype("float32")
    ex = tvm.compile(DefaultSchedule(target)(mod), target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(q), tvm.runtime.tensor(k)).numpy()
    scores = q.astype("float64") @ k / 8.0
    expected = np.exp(scores - scores.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

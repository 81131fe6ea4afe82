"""The default schedule on extents no vector-lane multiple divides (ViT's 197 tokens): contractions
take narrower vectors where those divide an axis, else are padded to lane multiples, and are
register-tiled; element-wise loops are vectorised with a scalar tail, and row tiles are balanced
over the cores; the results stay exact."""

import numpy as np
import tvm
import tvm_ffi
from cases.attention import random_inputs, run_reference
from tvm import relax, s_tir, tirx

from tvm_fusion_ext.analysis.graph import build_graphs
from tvm_fusion_ext.cost import fused_kernel
from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.pipelines import preprocess_passes
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
    assert not [loop for loop in loops if PARTITION_HINT in loop.annotations]   # every tail peeled
    vectors = [loop for loop in loops if loop.kind == tirx.ForKind.VECTORIZED and int(loop.extent) == 8]
    outer = [(int(loop.min), int(loop.extent)) for loop in loops if any(loop.body.same_as(v) for v in vectors)]
    assert outer and set(outer) == {(0, 24), (24, 1)}   # 197 = 24 whole vectors of 8, then the predicated one


def test_tail_vectorised_softmax_compiles_to_vector_code():
    """LLVM's vector instructions for the softmax rows' exp: a loop whose every vector is
    predicated would be scalarised by TVM's VectorizeLoop (its last vector must be peeled)."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": "core-avx2"})
    softmax = _prim_func(DefaultSchedule(target, AVX2)(_attention_scores()), "softmax")
    lib = tvm.tirx.build(tvm.IRModule({"softmax": softmax.with_attr("global_symbol", "softmax")}), target)
    assert "<8 x float> @llvm.exp" in lib.inspect_source("ll")


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


def test_pointwise_conv_to_few_channels_takes_half_width_vectors_before_padding():
    """MobileNetV2's projection 1x1 conv (96 -> 24 channels at 56 x 56): no 16-lane vector divides
    24 or 56 on AVX-512. Vectors of 8 lanes divide both, and a register tile on them needs no
    padded copy of the input (padding the columns to 64 ran 95 us against 74 us, Zen 4, 2 threads)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 96, 56, 56), "float32"))
    w = relax.Var("w", relax.TensorType((24, 96, 1, 1), "float32"))
    with bb.function("main", [x, w]):
        bb.emit_func_output(bb.emit(relax.op.nn.conv2d(x, w)))
    avx512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024,
                     vector_registers=32, l1_bytes=32 * 1024, l2_bytes=1024 * 1024)
    legalized = relax.transform.LegalizeOps()(bb.get())
    simplified = s_tir.transform.StmtSimplify()(legalized)  # as after FuseTIR: x[.., yy + ry] -> x[.., yy]
    conv = _prim_func(DefaultSchedule("llvm", avx512)(simplified), "conv2d")
    assert not [b.name for b in conv.body.block.alloc_buffers if "pad" in b.name]
    vectorized = {int(loop.extent) for loop in _loops(conv) if loop.kind == tirx.ForKind.VECTORIZED}
    assert 8 in vectorized and 16 not in vectorized, vectorized


def test_depthwise_conv_over_56_columns_gets_half_width_vectors():
    """No 16-lane vector divides 56 columns and a depthwise conv cannot be padded (its input is
    indexed by ``x + rx``): the register tile falls back to 7 vectors of 8 lanes."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 32, 56, 56), "float32"))
    w = relax.Var("w", relax.TensorType((32, 1, 3, 3), "float32"))
    with bb.function("main", [x, w]):
        bb.emit_func_output(bb.emit(relax.op.nn.conv2d(x, w, padding=1, groups=32)))
    avx512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024,
                     vector_registers=32, l1_bytes=32 * 1024, l2_bytes=1024 * 1024)
    conv = _prim_func(DefaultSchedule("llvm", avx512)(relax.transform.LegalizeOps()(bb.get())), "conv2d")
    vectorized = {int(loop.extent) for loop in _loops(conv) if loop.kind == tirx.ForKind.VECTORIZED}
    unrolled = [int(loop.extent) for loop in _loops(conv) if loop.kind == tirx.ForKind.UNROLLED]
    assert 8 in vectorized and 7 in unrolled


def _shuffled_pointwise_conv():
    """ShuffleNetV2's channel shuffle at 14 x 14, the split of its second half and the 1x1 conv
    that reads it, as one kernel (what NeoFlow's Eq. (4) merges): the group's ``FuseTIR`` kernel
    as the pipeline makes it (:func:`tvm_fusion_ext.cost.fused_kernel`)."""
    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((1, 58, 14, 14), "float32"))
    b = relax.Var("b", relax.TensorType((1, 58, 14, 14), "float32"))
    weight = relax.const(rng.standard_normal((58, 58, 1, 1)).astype("float32") * 0.1)
    with bb.function("main", [a, b]):
        with bb.dataflow():
            c = bb.emit(relax.op.concat([a, b], axis=1))
            r = bb.emit(relax.op.reshape(c, (1, 2, 58, 14, 14)))
            t = bb.emit(relax.op.permute_dims(r, (0, 2, 1, 3, 4)))
            s = bb.emit(relax.op.reshape(t, (1, 116, 14, 14)))
            half = bb.emit(relax.TupleGetItem(bb.emit(relax.op.split(s, 2, axis=1)), 1))
            out = bb.emit_output(relax.op.nn.conv2d(half, weight))
        bb.emit_func_output(out)
    with tvm.target.Target("llvm"):
        graph = build_graphs(tvm.transform.Sequential(preprocess_passes())(bb.get()))[0]
    return fused_kernel(graph, [n.index for n in graph.nodes if n.fusible])


def test_a_shuffled_operand_stays_a_block_so_the_pointwise_conv_is_padded_and_tiled():
    """Inlining the shuffle's permuted channel index (``rc % 2 * 58 + rc // 2 + 29``) into the
    conv would leave no einsum for ``pad_einsum``, and the 14 columns no whole vector: a
    one-row micro-kernel whose single accumulator chain waits on every FMA (3-4x slower than
    the conv alone). The shuffle stays a block the conv reads plainly; the conv is padded to 16
    columns and gets a register tile of several rows, and computes the same numbers."""
    kernel = _shuffled_pointwise_conv()
    scheduled = DefaultSchedule("llvm", AVX2)(tvm.IRModule({"main": kernel}))["main"]
    names = []
    tvm_ffi.structural_walk(scheduled.body, [(s_tir.SBlock, lambda blk: names.append(blk.name_hint))])
    assert any(name.endswith("_pad") for name in names), names
    update = next(loop for loop in _loops(scheduled) if isinstance(loop.body, s_tir.SBlockRealize)
                  and loop.body.block.name_hint == "conv2d_nchw_update")
    assert update.kind == tirx.ForKind.VECTORIZED and int(update.extent) == 8
    unrolled = [int(loop.extent) for loop in _loops(scheduled) if loop.kind == tirx.ForKind.UNROLLED]
    assert max(unrolled) >= 2                               # several accumulator rows

    inputs = random_inputs(kernel, seed=2)
    got, expected = run_reference(scheduled, inputs), run_reference(kernel, inputs)
    assert np.abs(got).max() > 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

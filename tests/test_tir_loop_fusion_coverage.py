"""AnchorLoopFusion moves a consumer into the anchor's tile loop only when the moved block still
runs every iteration once (``loop_fusion.reverse_compute_at_covering``).

TVM's ``reverse_compute_at`` gives the moved block a box of iterations per block variable derived
from the region the tile produces, and lost iterations silently in two fuzzing regressions:

* ``matmul_reshape_transpose_silu`` (APOLLO ``fuse_ops`` + FuseTIR output of
  the fuzzing case ``apollo_mismatch_fdd85400``, a sibling of
  ``tests/regressions/apollo_mismatch_44ac4785.py``): the
  reshape reads ``matmul[.., 2 * ax1 + ax2, ..]``; a tile of 3 of those columns is no box of
  ``(ax1, ax2)``, so TVM kept 2 of 3 rows;
* ``conv2d_concat_input_relu`` (NeoFlow's group of ``neoflow_mismatch_12e838e2``): the concat
  reads the conv for ``ax0 < 1`` and another input for ``ax0 >= 1``; only the conv is produced in
  the tile, so TVM kept ``ax0 = 0`` and the relus after it lost the second half.

Both blocks now stay loop nests of their own; the transpose + silu of the first case still move.
Numbers are compared with the unscheduled function on random non-zero inputs.
"""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.script import tirx as T

from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.tir_passes import AnchorLoopFusion

# The 2-core generic CPU spec of the machine where the fuzzer found both cases (pinned here so the
# tile that split the reshape's fused index does not depend on the host).
SPEC = CPUSpec("cpu2", num_cores=2, vector_bytes=16, fast_memory_bytes=512 * 1024, vector_registers=16,
               l1_bytes=32 * 1024)

@T.prim_func(s_tir=True)
def matmul_reshape_transpose_silu(x3: T.Buffer((T.int64(1), T.int64(4)), "float32"), x0: T.Buffer((T.int64(4), T.int64(5), T.int64(4), T.int64(6)), "float32"), T_reshape_intermediate: T.Buffer((T.int64(20), T.int64(3), T.int64(2)), "float32"), T_transpose_intermediate: T.Buffer((T.int64(4), T.int64(6), T.int64(1), T.int64(5)), "float32"), T_multiply_intermediate: T.Buffer((T.int64(4), T.int64(6), T.int64(1), T.int64(5)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    matmul_intermediate = T.sblock_alloc_buffer((T.int64(4), T.int64(5), T.int64(1), T.int64(6)))
    compute = T.sblock_alloc_buffer((T.int64(4), T.int64(6), T.int64(1), T.int64(5)))
    for i0, i1, i2, i3, k in T.grid(T.int64(4), T.int64(5), T.int64(1), T.int64(6), T.int64(4)):
        with T.sblock("matmul"):
            v_i0, v_i1, v_i2, v_i3, v_k = T.axis.remap("SSSSR", [i0, i1, i2, i3, k])
            T.reads(x3[v_i2, v_k], x0[v_i0, v_i1, v_k, v_i3])
            T.writes(matmul_intermediate[v_i0, v_i1, v_i2, v_i3])
            with T.init():
                matmul_intermediate[v_i0, v_i1, v_i2, v_i3] = T.float32(0.0)
            matmul_intermediate[v_i0, v_i1, v_i2, v_i3] = matmul_intermediate[v_i0, v_i1, v_i2, v_i3] + x3[v_i2, v_k] * x0[v_i0, v_i1, v_k, v_i3]
    for ax0, ax1, ax2 in T.grid(T.int64(20), T.int64(3), T.int64(2)):
        with T.sblock("T_reshape"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(matmul_intermediate[((v_ax1 * T.int64(2) + v_ax2) // T.int64(6) + v_ax0) % T.int64(20) // T.int64(5), ((v_ax1 * T.int64(2) + v_ax2) // T.int64(6) + v_ax0) % T.int64(5), T.int64(0), (v_ax1 * T.int64(2) + v_ax2) % T.int64(6)])
            T.writes(T_reshape_intermediate[v_ax0, v_ax1, v_ax2])
            T_reshape_intermediate[v_ax0, v_ax1, v_ax2] = matmul_intermediate[((v_ax1 * T.int64(2) + v_ax2) // T.int64(6) + v_ax0) % T.int64(20) // T.int64(5), ((v_ax1 * T.int64(2) + v_ax2) // T.int64(6) + v_ax0) % T.int64(5), T.int64(0), (v_ax1 * T.int64(2) + v_ax2) % T.int64(6)]
    for ax0, ax1, ax2, ax3 in T.grid(T.int64(4), T.int64(6), T.int64(1), T.int64(5)):
        with T.sblock("T_transpose"):
            v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
            T.reads(matmul_intermediate[v_ax0, v_ax3, v_ax2, v_ax1])
            T.writes(T_transpose_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
            T_transpose_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] = matmul_intermediate[v_ax0, v_ax3, v_ax2, v_ax1]
    for i0, i1, i2, i3 in T.grid(T.int64(4), T.int64(6), T.int64(1), T.int64(5)):
        with T.sblock("compute"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(T_transpose_intermediate[v_i0, v_i1, v_i2, v_i3])
            T.writes(compute[v_i0, v_i1, v_i2, v_i3])
            compute[v_i0, v_i1, v_i2, v_i3] = T.sigmoid(T_transpose_intermediate[v_i0, v_i1, v_i2, v_i3])
    for ax0, ax1, ax2, ax3 in T.grid(T.int64(4), T.int64(6), T.int64(1), T.int64(5)):
        with T.sblock("T_multiply"):
            v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
            T.reads(T_transpose_intermediate[v_ax0, v_ax1, v_ax2, v_ax3], compute[v_ax0, v_ax1, v_ax2, v_ax3])
            T.writes(T_multiply_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
            T_multiply_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] = T_transpose_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] * compute[v_ax0, v_ax1, v_ax2, v_ax3]

@T.prim_func(s_tir=True)
def conv2d_concat_input_relu(x1: T.Buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(3)), "float32"), x2: T.Buffer((T.int64(2), T.int64(4), T.int64(1), T.int64(1)), "float32"), x3: T.Buffer((T.int64(1), T.int64(2), T.int64(3), T.int64(2)), "float32"), conv2d_nchw_intermediate: T.Buffer((T.int64(1), T.int64(2), T.int64(3), T.int64(2)), "float32"), T_concat_intermediate: T.Buffer((T.int64(2), T.int64(2), T.int64(3), T.int64(2)), "float32"), compute_intermediate: T.Buffer((T.int64(2), T.int64(2), T.int64(3), T.int64(2)), "float32"), compute_intermediate_1: T.Buffer((T.int64(2), T.int64(2), T.int64(3), T.int64(2)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(3)))
    for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(4), T.int64(5), T.int64(3)):
        with T.sblock("pad_temp"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(x1[v_i0, v_i1, v_i2, v_i3])
            T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
            pad_temp[v_i0, v_i1, v_i2, v_i3] = x1[v_i0, v_i1, v_i2, v_i3]
    for nn, ff, yy, xx, rc, ry, rx in T.grid(T.int64(1), T.int64(2), T.int64(3), T.int64(2), T.int64(4), T.int64(1), T.int64(1)):
        with T.sblock("conv2d_nchw"):
            v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap("SSSSRRR", [nn, ff, yy, xx, rc, ry, rx])
            T.reads(pad_temp[v_nn, v_rc, v_yy * T.int64(2) + v_ry, v_xx * T.int64(2) + v_rx], x2[v_ff, v_rc, v_ry, v_rx])
            T.writes(conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx])
            with T.init():
                conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
            conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] + pad_temp[v_nn, v_rc, v_yy * T.int64(2) + v_ry, v_xx * T.int64(2) + v_rx] * x2[v_ff, v_rc, v_ry, v_rx]
    for ax0, ax1, ax2, ax3 in T.grid(T.int64(2), T.int64(2), T.int64(3), T.int64(2)):
        with T.sblock("T_concat"):
            v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
            T.reads(x3[v_ax0 - T.int64(1), v_ax1, v_ax2, v_ax3], conv2d_nchw_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
            T.writes(T_concat_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
            T_concat_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] = T.if_then_else(T.int64(1) <= v_ax0, x3[v_ax0 - T.int64(1), v_ax1, v_ax2, v_ax3], conv2d_nchw_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
    for i0, i1, i2, i3 in T.grid(T.int64(2), T.int64(2), T.int64(3), T.int64(2)):
        with T.sblock("compute"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(T_concat_intermediate[v_i0, v_i1, v_i2, v_i3])
            T.writes(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
            compute_intermediate[v_i0, v_i1, v_i2, v_i3] = T.max(T_concat_intermediate[v_i0, v_i1, v_i2, v_i3], T.float32(0.0))
    for i0, i1, i2, i3 in T.grid(T.int64(2), T.int64(2), T.int64(3), T.int64(2)):
        with T.sblock("compute1"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
            T.writes(compute_intermediate_1[v_i0, v_i1, v_i2, v_i3])
            compute_intermediate_1[v_i0, v_i1, v_i2, v_i3] = T.max(compute_intermediate[v_i0, v_i1, v_i2, v_i3], T.float32(0.0))


def _scheduled(func):
    sch = AnchorLoopFusion(SPEC).apply(func, tvm.target.Target("llvm"), False)
    assert sch is not None
    return sch.mod["main"]


def _outputs(func, seed=0):
    func = func.with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    rng = np.random.default_rng(seed)
    args = [tvm.runtime.tensor(rng.uniform(0.1, 1.0, [int(d) for d in p.ty.shape]).astype("float32"))
            for p in func.params]
    lib["main"](*args)
    return [a.numpy() for a in args]


def _blocks_per_parallel_loop(func) -> list[set]:
    """The names of the blocks under each parallel loop."""
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    found = []
    for loop in loops:
        if loop.kind == tirx.ForKind.PARALLEL:
            names = []
            tvm_ffi.structural_walk(loop.body, [(s_tir.SBlock, lambda b, names=names: names.append(b.name_hint))])
            found.append(set(names))
    return found


def _tiled_blocks(func):
    """Names of the blocks under the parallel tile loop: the one around the anchor (conv or
    matmul); blocks left out of it get parallel loops of their own."""
    return next((names for names in _blocks_per_parallel_loop(func)
                 if any(name.startswith(("matmul", "conv")) for name in names)), set())


def _parallel_blocks(func):
    return set().union(*_blocks_per_parallel_loop(func))


@pytest.mark.parametrize("func, stays_out, moved", [
    (matmul_reshape_transpose_silu, "T_reshape", "T_transpose"),
    (conv2d_concat_input_relu, "T_concat", None),
])
def test_consumer_that_would_lose_iterations_stays_out_of_the_tile(func, stays_out, moved):
    scheduled = _scheduled(func)
    tiled = _tiled_blocks(scheduled)
    assert stays_out not in tiled, tiled
    assert moved is None or moved in tiled, tiled
    assert stays_out in _parallel_blocks(scheduled), "a block left out still runs on every core"
    for got, want in zip(_outputs(scheduled), _outputs(func)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

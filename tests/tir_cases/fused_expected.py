# ruff: noqa  (TVMScript printed by TVM; kept as printed)
"""Expected output of ``AnchorLoopFusion`` under ``FAKE_SPEC`` for each case of ``fused.py``.

Generated once from the rule, then read and checked by hand against GraphTurbo section 4.1
(anchor tile loop fused and parallel, producers computed at the tile loop, consumers at the
innermost spatial tile loop, intermediates local). Contractions (conv, matmul) follow the register
tile of ``register_tile.py``: ``[tiles] [reduction blocks] [micro-kernels] [reduction in a block]
[rows] [vectors, lanes]``, producers and packed operands at the reduction-block loop, consumers at
the tile loop; ``conv2d_7x7_bias_relu`` (7 columns: no vector over x) and ``matmul_nt_bias``
vectorise the output channel / column with the weight packed ``[F / w, ..., w]`` per block."""


from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def conv2d_bias_relu(x: T.Buffer((T.int64(1), T.int64(4), T.int64(8), T.int64(8)), "float32"), w: T.Buffer((T.int64(8), T.int64(4), T.int64(3), T.int64(3)), "float32"), b: T.Buffer((T.int64(1), T.int64(8), T.int64(1), T.int64(1)), "float32"), compute_intermediate: T.Buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    pad_temp_local = T.sblock_alloc_buffer((T.int64(1), T.int64(4), T.int64(10), T.int64(10)), scope="local")
    conv2d_nchw_intermediate_local = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)), scope="local")
    for nn_0_ff_0_yy_0_xx_0_fused in T.parallel(T.int64(4)):
        for nn_1_init, ff_1_init, yy_1_init, xx_1_init in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(1)):
            for ff_2_init in T.unroll(T.int64(2)):
                for xx_2_init in T.unroll(T.int64(2)):
                    for xx_3_init in T.vectorized(T.int64(4)):
                        with T.sblock("conv2d_nchw_init"):
                            v_nn = T.axis.spatial(T.int64(1), nn_1_init)
                            v_ff = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(2) * T.int64(4) + ff_1_init * T.int64(2) + ff_2_init)
                            v_yy = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused % T.int64(2) * T.int64(4) + yy_1_init)
                            v_xx = T.axis.spatial(T.int64(8), xx_1_init * T.int64(8) + xx_2_init * T.int64(4) + xx_3_init)
                            T.reads()
                            T.writes(conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx])
                            conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
        for rc in range(T.int64(4)):
            for ax0, ax1, ax2, ax3_0 in T.grid(T.int64(1), T.int64(1), T.int64(6), T.int64(2)):
                for ax3_1 in T.vectorized(T.int64(5)):
                    with T.sblock("pad_temp"):
                        v_i0 = T.axis.spatial(T.int64(1), ax0)
                        v_i1 = T.axis.spatial(T.int64(4), rc + ax1)
                        v_i2 = T.axis.spatial(T.int64(10), nn_0_ff_0_yy_0_xx_0_fused % T.int64(2) * T.int64(4) + ax2)
                        v_i3 = T.axis.spatial(T.int64(10), ax3_0 * T.int64(5) + ax3_1)
                        T.reads(x[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)])
                        T.writes(pad_temp_local[v_i0, v_i1, v_i2, v_i3])
                        pad_temp_local[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(T.int64(1) <= v_i2 and v_i2 < T.int64(9) and T.int64(1) <= v_i3 and v_i3 < T.int64(9), x[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)], T.float32(0.0))
            for nn_1, ff_1, yy_1, xx_1, ry in T.grid(T.int64(1), T.int64(2), T.int64(4), T.int64(1), T.int64(3)):
                for rx in T.unroll(T.int64(3)):
                    for ff_2 in T.unroll(T.int64(2)):
                        for xx_2 in T.unroll(T.int64(2)):
                            for xx_3 in T.vectorized(T.int64(4)):
                                with T.sblock("conv2d_nchw_update"):
                                    v_nn = T.axis.spatial(T.int64(1), nn_1)
                                    v_ff = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(2) * T.int64(4) + ff_1 * T.int64(2) + ff_2)
                                    v_yy = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused % T.int64(2) * T.int64(4) + yy_1)
                                    v_xx = T.axis.spatial(T.int64(8), xx_1 * T.int64(8) + xx_2 * T.int64(4) + xx_3)
                                    v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                    T.reads(conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx], pad_temp_local[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx])
                                    T.writes(conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx])
                                    conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx] = conv2d_nchw_intermediate_local[v_nn, v_ff, v_yy, v_xx] + pad_temp_local[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * w[v_ff, v_rc, v_ry, v_rx]
        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(4), T.int64(4)):
            for ax3 in T.vectorized(T.int64(8)):
                with T.sblock("compute"):
                    v_i0 = T.axis.spatial(T.int64(1), ax0)
                    v_i1 = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(2) * T.int64(4) + ax1)
                    v_i2 = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused % T.int64(2) * T.int64(4) + ax2)
                    v_i3 = T.axis.spatial(T.int64(8), ax3)
                    T.reads(conv2d_nchw_intermediate_local[v_i0, v_i1, v_i2, v_i3], b[v_i0, v_i1, T.int64(0), T.int64(0)])
                    T.writes(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
                    compute_intermediate[v_i0, v_i1, v_i2, v_i3] = T.max(conv2d_nchw_intermediate_local[v_i0, v_i1, v_i2, v_i3] + b[v_i0, v_i1, T.int64(0), T.int64(0)], T.float32(0.0))


@T.prim_func(s_tir=True)
def conv2d_7x7_bias_relu(x: T.Buffer((T.int64(1), T.int64(4), T.int64(7), T.int64(7)), "float32"), w: T.Buffer((T.int64(8), T.int64(4), T.int64(3), T.int64(3)), "float32"), b: T.Buffer((T.int64(1), T.int64(8), T.int64(1), T.int64(1)), "float32"), compute_intermediate: T.Buffer((T.int64(1), T.int64(8), T.int64(7), T.int64(7)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    pad_temp_local = T.sblock_alloc_buffer((T.int64(1), T.int64(4), T.int64(9), T.int64(9)), scope="local")
    conv2d_nchw_intermediate_local = T.sblock_alloc_buffer((T.int64(2), T.int64(1), T.int64(7), T.int64(7), T.int64(4)), scope="local")
    w_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4), T.int64(3), T.int64(3), T.int64(4)), scope="local")
    for nn_0_ff_0_yy_0_xx_0_fused in T.parallel(T.int64(14)):
        for nn_1_init, ff_1_init, yy_1_init, xx_1_init in T.grid(T.int64(1), T.int64(1), T.int64(1), T.int64(1)):
            for xx_2_init in T.unroll(T.int64(7)):
                for ff_2_init in T.unroll(T.int64(1)):
                    for ff_3_init in T.vectorized(T.int64(4)):
                        with T.sblock("conv2d_nchw_init"):
                            v_nn = T.axis.spatial(T.int64(1), nn_1_init)
                            v_ff = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(7) * T.int64(4) + ff_1_init * T.int64(4) + ff_2_init * T.int64(4) + ff_3_init)
                            v_yy = T.axis.spatial(T.int64(7), nn_0_ff_0_yy_0_xx_0_fused % T.int64(7) + yy_1_init)
                            v_xx = T.axis.spatial(T.int64(7), xx_1_init * T.int64(7) + xx_2_init)
                            T.reads()
                            T.writes(conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)])
                            conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)] = T.float32(0.0)
        for rc in range(T.int64(4)):
            for ax0, ax1, ax2 in T.grid(T.int64(4), T.int64(1), T.int64(3)):
                for ax3 in T.vectorized(T.int64(3)):
                    with T.sblock("w_local"):
                        v0 = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(7) * T.int64(4) + ax0)
                        v1 = T.axis.spatial(T.int64(4), rc + ax1)
                        v2, v3 = T.axis.remap("SS", [ax2, ax3])
                        T.reads(w[v0, v1, v2, v3])
                        T.writes(w_local[v0 // T.int64(4), v1, v2, v3, v0 % T.int64(4)])
                        w_local[v0 // T.int64(4), v1, v2, v3, v0 % T.int64(4)] = w[v0, v1, v2, v3]
            for ax0, ax1, ax2, ax3_0 in T.grid(T.int64(1), T.int64(1), T.int64(3), T.int64(3)):
                for ax3_1 in T.vectorized(T.int64(3)):
                    with T.sblock("pad_temp"):
                        v_i0 = T.axis.spatial(T.int64(1), ax0)
                        v_i1 = T.axis.spatial(T.int64(4), rc + ax1)
                        v_i2 = T.axis.spatial(T.int64(9), nn_0_ff_0_yy_0_xx_0_fused % T.int64(7) + ax2)
                        v_i3 = T.axis.spatial(T.int64(9), ax3_0 * T.int64(3) + ax3_1)
                        T.reads(x[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)])
                        T.writes(pad_temp_local[v_i0, v_i1, v_i2, v_i3])
                        pad_temp_local[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(T.int64(1) <= v_i2 and v_i2 < T.int64(8) and T.int64(1) <= v_i3 and v_i3 < T.int64(8), x[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)], T.float32(0.0))
            for ry, nn_1, ff_1, yy_1, xx_1, rx in T.grid(T.int64(3), T.int64(1), T.int64(1), T.int64(1), T.int64(1), T.int64(3)):
                for xx_2 in T.unroll(T.int64(7)):
                    for ff_2 in T.unroll(T.int64(1)):
                        for ff_3 in T.vectorized(T.int64(4)):
                            with T.sblock("conv2d_nchw_update"):
                                v_nn = T.axis.spatial(T.int64(1), nn_1)
                                v_ff = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(7) * T.int64(4) + ff_1 * T.int64(4) + ff_2 * T.int64(4) + ff_3)
                                v_yy = T.axis.spatial(T.int64(7), nn_0_ff_0_yy_0_xx_0_fused % T.int64(7) + yy_1)
                                v_xx = T.axis.spatial(T.int64(7), xx_1 * T.int64(7) + xx_2)
                                v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                T.reads(conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)], pad_temp_local[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], w_local[v_ff // T.int64(4), v_rc, v_ry, v_rx, v_ff % T.int64(4)])
                                T.writes(conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)])
                                conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)] = conv2d_nchw_intermediate_local[v_ff // T.int64(4), v_nn, v_yy, v_xx, v_ff % T.int64(4)] + pad_temp_local[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * w_local[v_ff // T.int64(4), v_rc, v_ry, v_rx, v_ff % T.int64(4)]
        for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(4), T.int64(1)):
            for ax3 in T.vectorized(T.int64(7)):
                with T.sblock("compute"):
                    v_i0 = T.axis.spatial(T.int64(1), ax0)
                    v_i1 = T.axis.spatial(T.int64(8), nn_0_ff_0_yy_0_xx_0_fused // T.int64(7) * T.int64(4) + ax1)
                    v_i2 = T.axis.spatial(T.int64(7), nn_0_ff_0_yy_0_xx_0_fused % T.int64(7) + ax2)
                    v_i3 = T.axis.spatial(T.int64(7), ax3)
                    T.reads(conv2d_nchw_intermediate_local[v_i1 // T.int64(4), v_i0, v_i2, v_i3, v_i1 % T.int64(4)], b[v_i0, v_i1, T.int64(0), T.int64(0)])
                    T.writes(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
                    compute_intermediate[v_i0, v_i1, v_i2, v_i3] = T.max(conv2d_nchw_intermediate_local[v_i1 // T.int64(4), v_i0, v_i2, v_i3, v_i1 % T.int64(4)] + b[v_i0, v_i1, T.int64(0), T.int64(0)], T.float32(0.0))


@T.prim_func(s_tir=True)
def matmul_bias_gelu(x: T.Buffer((T.int64(16), T.int64(32)), "float32"), w: T.Buffer((T.int64(32), T.int64(16)), "float32"), b: T.Buffer((T.int64(16),), "float32"), T_multiply_intermediate: T.Buffer((T.int64(16), T.int64(16)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    matmul_intermediate_local = T.sblock_alloc_buffer((T.int64(16), T.int64(16)), scope="local")
    for i0_0_i1_0_fused in T.parallel(T.int64(2)):
        for i0_1_init, i1_1_init in T.grid(T.int64(4), T.int64(1)):
            for i0_2_init in T.unroll(T.int64(2)):
                for i1_2_init in T.unroll(T.int64(4)):
                    for i1_3_init in T.vectorized(T.int64(4)):
                        with T.sblock("matmul_init"):
                            v_i0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + i0_1_init * T.int64(2) + i0_2_init)
                            v_i1 = T.axis.spatial(T.int64(16), i1_1_init * T.int64(16) + i1_2_init * T.int64(4) + i1_3_init)
                            T.reads()
                            T.writes(matmul_intermediate_local[v_i0, v_i1])
                            matmul_intermediate_local[v_i0, v_i1] = T.float32(0.0)
        for k_0, i0_1, i1_1, k_1 in T.grid(T.int64(8), T.int64(4), T.int64(1), T.int64(4)):
            for i0_2 in T.unroll(T.int64(2)):
                for i1_2 in T.unroll(T.int64(4)):
                    for i1_3 in T.vectorized(T.int64(4)):
                        with T.sblock("matmul_update"):
                            v_i0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + i0_1 * T.int64(2) + i0_2)
                            v_i1 = T.axis.spatial(T.int64(16), i1_1 * T.int64(16) + i1_2 * T.int64(4) + i1_3)
                            v_k = T.axis.reduce(T.int64(32), k_0 * T.int64(4) + k_1)
                            T.reads(matmul_intermediate_local[v_i0, v_i1], x[v_i0, v_k], w[v_k, v_i1])
                            T.writes(matmul_intermediate_local[v_i0, v_i1])
                            matmul_intermediate_local[v_i0, v_i1] = matmul_intermediate_local[v_i0, v_i1] + x[v_i0, v_k] * w[v_k, v_i1]
        for ax0, ax1_0 in T.grid(T.int64(8), T.int64(2)):
            for ax1_1 in T.vectorized(T.int64(8)):
                with T.sblock("T_multiply_2"):
                    v_ax0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + ax0)
                    v_ax1 = T.axis.spatial(T.int64(16), ax1_0 * T.int64(8) + ax1_1)
                    T.reads(matmul_intermediate_local[v_ax0, v_ax1], b[v_ax1])
                    T.writes(T_multiply_intermediate[v_ax0, v_ax1])
                    T_multiply_intermediate[v_ax0, v_ax1] = (matmul_intermediate_local[v_ax0, v_ax1] + b[v_ax1]) * (T.float32(0.5) + T.erf((matmul_intermediate_local[v_ax0, v_ax1] + b[v_ax1]) * T.float32(0.70710678118654757)) * T.float32(0.5))


@T.prim_func(s_tir=True)
def matmul_nt_bias(x: T.Buffer((T.int64(16), T.int64(32)), "float32"), w: T.Buffer((T.int64(16), T.int64(32)), "float32"), b: T.Buffer((T.int64(16),), "float32"), T_add_intermediate: T.Buffer((T.int64(16), T.int64(16)), "float32")):
    T.func_attr({"tirx.noalias": True})
    # with T.sblock("root"):
    matmul_intermediate_local = T.sblock_alloc_buffer((T.int64(16), T.int64(16)), scope="local")
    w_local = T.sblock_alloc_buffer((T.int64(1), T.int64(32), T.int64(16)), scope="local")
    for i0_0_i1_0_fused in T.parallel(T.int64(2)):
        for i0_1_init, i1_1_init in T.grid(T.int64(4), T.int64(1)):
            for i0_2_init in T.unroll(T.int64(2)):
                for i1_2_init in T.unroll(T.int64(4)):
                    for i1_3_init in T.vectorized(T.int64(4)):
                        with T.sblock("matmul_init"):
                            v_i0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + i0_1_init * T.int64(2) + i0_2_init)
                            v_i1 = T.axis.spatial(T.int64(16), i1_1_init * T.int64(16) + i1_2_init * T.int64(4) + i1_3_init)
                            T.reads()
                            T.writes(matmul_intermediate_local[v_i0, v_i1])
                            matmul_intermediate_local[v_i0, v_i1] = T.float32(0.0)
        for k_0 in range(T.int64(8)):
            for ax0 in range(T.int64(16)):
                for ax1 in T.vectorized(T.int64(4)):
                    with T.sblock("w_local"):
                        v0 = T.axis.spatial(T.int64(16), ax0)
                        v1 = T.axis.spatial(T.int64(32), k_0 * T.int64(4) + ax1)
                        T.reads(w[v0, v1])
                        T.writes(w_local[T.int64(0), v1, v0])
                        w_local[T.int64(0), v1, v0] = w[v0, v1]
            for i0_1, i1_1, k_1 in T.grid(T.int64(4), T.int64(1), T.int64(4)):
                for i0_2 in T.unroll(T.int64(2)):
                    for i1_2 in T.unroll(T.int64(4)):
                        for i1_3 in T.vectorized(T.int64(4)):
                            with T.sblock("matmul_update"):
                                v_i0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + i0_1 * T.int64(2) + i0_2)
                                v_i1 = T.axis.spatial(T.int64(16), i1_1 * T.int64(16) + i1_2 * T.int64(4) + i1_3)
                                v_k = T.axis.reduce(T.int64(32), k_0 * T.int64(4) + k_1)
                                T.reads(matmul_intermediate_local[v_i0, v_i1], x[v_i0, v_k], w_local[T.int64(0), v_k, v_i1])
                                T.writes(matmul_intermediate_local[v_i0, v_i1])
                                matmul_intermediate_local[v_i0, v_i1] = matmul_intermediate_local[v_i0, v_i1] + x[v_i0, v_k] * w_local[T.int64(0), v_k, v_i1]
        for ax0, ax1_0 in T.grid(T.int64(8), T.int64(2)):
            for ax1_1 in T.vectorized(T.int64(8)):
                with T.sblock("T_add"):
                    v_ax0 = T.axis.spatial(T.int64(16), i0_0_i1_0_fused * T.int64(8) + ax0)
                    v_ax1 = T.axis.spatial(T.int64(16), ax1_0 * T.int64(8) + ax1_1)
                    T.reads(matmul_intermediate_local[v_ax0, v_ax1], b[v_ax1])
                    T.writes(T_add_intermediate[v_ax0, v_ax1])
                    T_add_intermediate[v_ax0, v_ax1] = matmul_intermediate_local[v_ax0, v_ax1] + b[v_ax1]


@T.prim_func(s_tir=True)
def softmax(x: T.Buffer((T.int64(4), T.int64(32)), "float32"), T_softmax_norm: T.Buffer((T.int64(4), T.int64(32)), "float32")):
    T.func_attr({"op_pattern": 4, "tirx.noalias": True})
    T_softmax_maxelem_local = T.sblock_alloc_buffer((T.int64(4),), scope="local")
    T_softmax_exp_local = T.sblock_alloc_buffer((T.int64(4), T.int64(32)), scope="local")
    T_softmax_expsum_local = T.sblock_alloc_buffer((T.int64(4),), scope="local")
    T_softmax_maxelem_rf_local = T.sblock_alloc_buffer((T.int64(4), T.int64(8)), scope="local")
    T_softmax_expsum_rf_local = T.sblock_alloc_buffer((T.int64(4), T.int64(8)), scope="local")
    for i0_0 in T.parallel(T.int64(2)):
        for i0_1 in range(T.int64(2)):
            for ax1_init in range(T.int64(1)):
                for ax0_init in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_maxelem_rf_init"):
                        vk_1 = T.axis.spatial(T.int64(8), ax0_init)
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1_init)
                        T.reads()
                        T.writes(T_softmax_maxelem_rf_local[v_i0, vk_1])
                        T_softmax_maxelem_rf_local[v_i0, vk_1] = T.float32(-340282346638528859811704183484516925440.0)
            for ax2, ax1 in T.grid(T.int64(4), T.int64(1)):
                for ax0 in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_maxelem_rf_update"):
                        vk_1 = T.axis.spatial(T.int64(8), ax0)
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1)
                        vk_0 = T.axis.reduce(T.int64(4), ax2)
                        T.reads(T_softmax_maxelem_rf_local[v_i0, vk_1], x[v_i0, vk_0 * T.int64(8) + vk_1])
                        T.writes(T_softmax_maxelem_rf_local[v_i0, vk_1])
                        T_softmax_maxelem_rf_local[v_i0, vk_1] = T.max(T_softmax_maxelem_rf_local[v_i0, vk_1], x[v_i0, vk_0 * T.int64(8) + vk_1])
            for ax0, ax1 in T.grid(T.int64(8), T.int64(1)):
                with T.sblock("T_softmax_maxelem"):
                    vk_1 = T.axis.reduce(T.int64(8), ax0)
                    v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1)
                    T.reads(T_softmax_maxelem_rf_local[v_i0, vk_1])
                    T.writes(T_softmax_maxelem_local[v_i0])
                    with T.init():
                        T_softmax_maxelem_local[v_i0] = T.float32(-340282346638528859811704183484516925440.0)
                    T_softmax_maxelem_local[v_i0] = T.max(T_softmax_maxelem_local[v_i0], T_softmax_maxelem_rf_local[v_i0, vk_1])
            for ax0, ax1_0 in T.grid(T.int64(1), T.int64(4)):
                for ax1_1 in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_exp"):
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax0)
                        v_i1 = T.axis.spatial(T.int64(32), ax1_0 * T.int64(8) + ax1_1)
                        T.reads(x[v_i0, v_i1], T_softmax_maxelem_local[v_i0])
                        T.writes(T_softmax_exp_local[v_i0, v_i1])
                        T_softmax_exp_local[v_i0, v_i1] = T.exp(x[v_i0, v_i1] - T_softmax_maxelem_local[v_i0])
            for ax1_init in range(T.int64(1)):
                for ax0_init in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_expsum_rf_init"):
                        vk_1 = T.axis.spatial(T.int64(8), ax0_init)
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1_init)
                        T.reads()
                        T.writes(T_softmax_expsum_rf_local[v_i0, vk_1])
                        T_softmax_expsum_rf_local[v_i0, vk_1] = T.float32(0.0)
            for ax2, ax1 in T.grid(T.int64(4), T.int64(1)):
                for ax0 in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_expsum_rf_update"):
                        vk_1 = T.axis.spatial(T.int64(8), ax0)
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1)
                        vk_0 = T.axis.reduce(T.int64(4), ax2)
                        T.reads(T_softmax_expsum_rf_local[v_i0, vk_1], T_softmax_exp_local[v_i0, vk_0 * T.int64(8) + vk_1])
                        T.writes(T_softmax_expsum_rf_local[v_i0, vk_1])
                        T_softmax_expsum_rf_local[v_i0, vk_1] = T_softmax_expsum_rf_local[v_i0, vk_1] + T_softmax_exp_local[v_i0, vk_0 * T.int64(8) + vk_1]
            for ax0, ax1 in T.grid(T.int64(8), T.int64(1)):
                with T.sblock("T_softmax_expsum"):
                    vk_1 = T.axis.reduce(T.int64(8), ax0)
                    v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1 + ax1)
                    T.reads(T_softmax_expsum_rf_local[v_i0, vk_1])
                    T.writes(T_softmax_expsum_local[v_i0])
                    with T.init():
                        T_softmax_expsum_local[v_i0] = T.float32(0.0)
                    T_softmax_expsum_local[v_i0] = T_softmax_expsum_local[v_i0] + T_softmax_expsum_rf_local[v_i0, vk_1]
            for i1_0 in range(T.int64(4)):
                for i1_1 in T.vectorized(T.int64(8)):
                    with T.sblock("T_softmax_norm"):
                        v_i0 = T.axis.spatial(T.int64(4), i0_0 * T.int64(2) + i0_1)
                        v_i1 = T.axis.spatial(T.int64(32), i1_0 * T.int64(8) + i1_1)
                        T.reads(T_softmax_exp_local[v_i0, v_i1], T_softmax_expsum_local[v_i0])
                        T.writes(T_softmax_norm[v_i0, v_i1])
                        T.sblock_attr({"axis": 1})
                        T_softmax_norm[v_i0, v_i1] = T_softmax_exp_local[v_i0, v_i1] / T_softmax_expsum_local[v_i0]


@T.prim_func(s_tir=True)
def layer_norm(x: T.Buffer((T.int64(2), T.int64(4), T.int64(32)), "float32"), g: T.Buffer((T.int64(32),), "float32"), b: T.Buffer((T.int64(32),), "float32"), T_layer_norm: T.Buffer((T.int64(2), T.int64(4), T.int64(32)), "float32")):
    T.func_attr({"op_pattern": 4, "tirx.noalias": True})
    x_sum_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4)), scope="local")
    x_mean_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4)), scope="local")
    x_var_sum_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4)), scope="local")
    x_sum_rf_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4), T.int64(8)), scope="local")
    x_var_sum_rf_local = T.sblock_alloc_buffer((T.int64(2), T.int64(4), T.int64(8)), scope="local")
    for ax0_0_ax1_0_fused in T.parallel(T.int64(2)):
        for ax0_1, ax1_1 in T.grid(T.int64(1), T.int64(4)):
            for ax1_init, ax2_init in T.grid(T.int64(1), T.int64(1)):
                for ax0_init in T.vectorized(T.int64(8)):
                    with T.sblock("x_sum_rf_init"):
                        vk2_1 = T.axis.spatial(T.int64(8), ax0_init)
                        v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1_init)
                        v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2_init)
                        T.reads()
                        T.writes(x_sum_rf_local[v_ax0, v_ax1, vk2_1])
                        x_sum_rf_local[v_ax0, v_ax1, vk2_1] = T.float32(0.0)
            for ax3, ax1, ax2 in T.grid(T.int64(4), T.int64(1), T.int64(1)):
                for ax0 in T.vectorized(T.int64(8)):
                    with T.sblock("x_sum_rf_update"):
                        vk2_1 = T.axis.spatial(T.int64(8), ax0)
                        v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1)
                        v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2)
                        vk2_0 = T.axis.reduce(T.int64(4), ax3)
                        T.reads(x_sum_rf_local[v_ax0, v_ax1, vk2_1], x[v_ax0, v_ax1, vk2_0 * T.int64(8) + vk2_1])
                        T.writes(x_sum_rf_local[v_ax0, v_ax1, vk2_1])
                        x_sum_rf_local[v_ax0, v_ax1, vk2_1] = x_sum_rf_local[v_ax0, v_ax1, vk2_1] + x[v_ax0, v_ax1, vk2_0 * T.int64(8) + vk2_1]
            for ax0, ax1, ax2 in T.grid(T.int64(8), T.int64(1), T.int64(1)):
                with T.sblock("x_sum"):
                    vk2_1 = T.axis.reduce(T.int64(8), ax0)
                    v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1)
                    v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2)
                    T.reads(x_sum_rf_local[v_ax0, v_ax1, vk2_1])
                    T.writes(x_sum_local[v_ax0, v_ax1])
                    with T.init():
                        x_sum_local[v_ax0, v_ax1] = T.float32(0.0)
                    x_sum_local[v_ax0, v_ax1] = x_sum_local[v_ax0, v_ax1] + x_sum_rf_local[v_ax0, v_ax1, vk2_1]
            for ax0, ax1 in T.grid(T.int64(1), T.int64(1)):
                with T.sblock("x_mean"):
                    v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax0)
                    v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax1)
                    T.reads(x_sum_local[v_ax0, v_ax1])
                    T.writes(x_mean_local[v_ax0, v_ax1])
                    x_mean_local[v_ax0, v_ax1] = x_sum_local[v_ax0, v_ax1] / T.float32(32.0)
            for ax1_init, ax2_init in T.grid(T.int64(1), T.int64(1)):
                for ax0_init in T.vectorized(T.int64(8)):
                    with T.sblock("x_var_sum_rf_init"):
                        vk2_1 = T.axis.spatial(T.int64(8), ax0_init)
                        v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1_init)
                        v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2_init)
                        T.reads()
                        T.writes(x_var_sum_rf_local[v_ax0, v_ax1, vk2_1])
                        x_var_sum_rf_local[v_ax0, v_ax1, vk2_1] = T.float32(0.0)
            for ax3, ax1, ax2 in T.grid(T.int64(4), T.int64(1), T.int64(1)):
                for ax0 in T.vectorized(T.int64(8)):
                    with T.sblock("x_var_sum_rf_update"):
                        vk2_1 = T.axis.spatial(T.int64(8), ax0)
                        v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1)
                        v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2)
                        vk2_0 = T.axis.reduce(T.int64(4), ax3)
                        T.reads(x_var_sum_rf_local[v_ax0, v_ax1, vk2_1], x[v_ax0, v_ax1, vk2_0 * T.int64(8) + vk2_1], x_mean_local[v_ax0, v_ax1])
                        T.writes(x_var_sum_rf_local[v_ax0, v_ax1, vk2_1])
                        x_var_sum_rf_local[v_ax0, v_ax1, vk2_1] = x_var_sum_rf_local[v_ax0, v_ax1, vk2_1] + (x[v_ax0, v_ax1, vk2_0 * T.int64(8) + vk2_1] - x_mean_local[v_ax0, v_ax1]) * (x[v_ax0, v_ax1, vk2_0 * T.int64(8) + vk2_1] - x_mean_local[v_ax0, v_ax1])
            for ax0, ax1, ax2 in T.grid(T.int64(8), T.int64(1), T.int64(1)):
                with T.sblock("x_var_sum"):
                    vk2_1 = T.axis.reduce(T.int64(8), ax0)
                    v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax1)
                    v_ax1 = T.axis.spatial(T.int64(4), ax1_1 + ax2)
                    T.reads(x_var_sum_rf_local[v_ax0, v_ax1, vk2_1])
                    T.writes(x_var_sum_local[v_ax0, v_ax1])
                    with T.init():
                        x_var_sum_local[v_ax0, v_ax1] = T.float32(0.0)
                    x_var_sum_local[v_ax0, v_ax1] = x_var_sum_local[v_ax0, v_ax1] + x_var_sum_rf_local[v_ax0, v_ax1, vk2_1]
            for ax2_0 in range(T.int64(4)):
                for ax2_1 in T.vectorized(T.int64(8)):
                    with T.sblock("T_layer_norm"):
                        v_ax0 = T.axis.spatial(T.int64(2), ax0_0_ax1_0_fused + ax0_1)
                        v_ax1 = T.axis.spatial(T.int64(4), ax1_1)
                        v_ax2 = T.axis.spatial(T.int64(32), ax2_0 * T.int64(8) + ax2_1)
                        T.reads(x[v_ax0, v_ax1, v_ax2], x_mean_local[v_ax0, v_ax1], x_var_sum_local[v_ax0, v_ax1], g[v_ax2], b[v_ax2])
                        T.writes(T_layer_norm[v_ax0, v_ax1, v_ax2])
                        T_layer_norm[v_ax0, v_ax1, v_ax2] = (x[v_ax0, v_ax1, v_ax2] - x_mean_local[v_ax0, v_ax1]) * T.rsqrt(x_var_sum_local[v_ax0, v_ax1] / T.float32(32.0) + T.float32(1.0000000000000001e-05)) * g[v_ax2] + b[v_ax2]


@T.prim_func(s_tir=True)
def sum_divide(x: T.Buffer((T.int64(4), T.int64(32)), "float32"), T_divide: T.Buffer((T.int64(4), T.int64(32)), "float32")):
    T.func_attr({"tirx.noalias": True})
    x_red_local = T.sblock_alloc_buffer((T.int64(4), T.int64(1)), scope="local")
    x_red_rf_local = T.sblock_alloc_buffer((T.int64(4), T.int64(1), T.int64(8)), scope="local")
    for ax0_0 in T.parallel(T.int64(2)):
        for ax0_1 in range(T.int64(2)):
            for ax1_init, ax2_init in T.grid(T.int64(1), T.int64(1)):
                for ax0_init in T.vectorized(T.int64(8)):
                    with T.sblock("x_red_rf_init"):
                        vk1_1 = T.axis.spatial(T.int64(8), ax0_init)
                        v_ax0 = T.axis.spatial(T.int64(4), ax0_0 * T.int64(2) + ax0_1 + ax1_init)
                        v_ax1 = T.axis.spatial(T.int64(1), ax2_init)
                        T.reads()
                        T.writes(x_red_rf_local[v_ax0, v_ax1, vk1_1])
                        x_red_rf_local[v_ax0, v_ax1, vk1_1] = T.float32(0.0)
            for ax3, ax1, ax2 in T.grid(T.int64(4), T.int64(1), T.int64(1)):
                for ax0 in T.vectorized(T.int64(8)):
                    with T.sblock("x_red_rf_update"):
                        vk1_1 = T.axis.spatial(T.int64(8), ax0)
                        v_ax0 = T.axis.spatial(T.int64(4), ax0_0 * T.int64(2) + ax0_1 + ax1)
                        v_ax1, vk1_0 = T.axis.remap("SR", [ax2, ax3])
                        T.reads(x_red_rf_local[v_ax0, v_ax1, vk1_1], x[v_ax0, vk1_0 * T.int64(8) + vk1_1])
                        T.writes(x_red_rf_local[v_ax0, v_ax1, vk1_1])
                        x_red_rf_local[v_ax0, v_ax1, vk1_1] = x_red_rf_local[v_ax0, v_ax1, vk1_1] + x[v_ax0, vk1_0 * T.int64(8) + vk1_1]
            for ax0, ax1, ax2 in T.grid(T.int64(8), T.int64(1), T.int64(1)):
                with T.sblock("x_red"):
                    vk1_1 = T.axis.reduce(T.int64(8), ax0)
                    v_ax0 = T.axis.spatial(T.int64(4), ax0_0 * T.int64(2) + ax0_1 + ax1)
                    v_ax1 = T.axis.spatial(T.int64(1), ax2)
                    T.reads(x_red_rf_local[v_ax0, v_ax1, vk1_1])
                    T.writes(x_red_local[v_ax0, v_ax1])
                    with T.init():
                        x_red_local[v_ax0, v_ax1] = T.float32(0.0)
                    x_red_local[v_ax0, v_ax1] = x_red_local[v_ax0, v_ax1] + x_red_rf_local[v_ax0, v_ax1, vk1_1]
            for ax1_0 in range(T.int64(4)):
                for ax1_1 in T.vectorized(T.int64(8)):
                    with T.sblock("T_divide"):
                        v_ax0 = T.axis.spatial(T.int64(4), ax0_0 * T.int64(2) + ax0_1)
                        v_ax1 = T.axis.spatial(T.int64(32), ax1_0 * T.int64(8) + ax1_1)
                        T.reads(x[v_ax0, v_ax1], x_red_local[v_ax0, T.int64(0)])
                        T.writes(T_divide[v_ax0, v_ax1])
                        T_divide[v_ax0, v_ax1] = x[v_ax0, v_ax1] / x_red_local[v_ax0, T.int64(0)]

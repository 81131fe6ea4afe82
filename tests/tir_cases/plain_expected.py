# ruff: noqa  (TVMScript printed by TVM; kept as printed)
"""Expected output of ``PlainSchedule`` (2 cores, 128-bit vectors) for ``reductions.elementwise``
and ``fused.sum_divide``: outer spatial loops fused and parallel, inner spatial loop vectorised,
a row reduction vectorised along its row (per-lane partial sums, then a write-back over the
lanes), each block in its own loop nest."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def elementwise(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
    for i_0 in T.parallel(2):
        for i_1 in T.vectorized(8):
            with T.sblock("b"):
                vi = T.axis.spatial(16, i_0 * 8 + i_1)
                b[vi] = a[vi] * T.float32(2.0)


@T.prim_func(s_tir=True)
def sum_divide(x: T.Buffer((T.int64(4), T.int64(32)), "float32"), T_divide: T.Buffer((T.int64(4), T.int64(32)), "float32")):
    T.func_attr({"tirx.noalias": True})
    x_red = T.sblock_alloc_buffer((T.int64(4), T.int64(1)))
    x_red_rf = T.sblock_alloc_buffer((T.int64(4), T.int64(1), T.int64(8)))
    for ax0_ax1_fused in T.parallel(T.int64(4)):
        for k1_1_init in T.vectorized(T.int64(8)):
            with T.sblock("x_red_rf_init"):
                vk1_1, v_ax0 = T.axis.remap("SS", [k1_1_init, ax0_ax1_fused])
                v_ax1 = T.axis.spatial(T.int64(1), T.int64(0))
                T.reads()
                T.writes(x_red_rf[v_ax0, v_ax1, vk1_1])
                x_red_rf[v_ax0, v_ax1, vk1_1] = T.float32(0.0)
        for k1_0 in range(T.int64(4)):
            for k1_1 in T.vectorized(T.int64(8)):
                with T.sblock("x_red_rf_update"):
                    vk1_1, v_ax0 = T.axis.remap("SS", [k1_1, ax0_ax1_fused])
                    v_ax1 = T.axis.spatial(T.int64(1), T.int64(0))
                    vk1_0 = T.axis.reduce(T.int64(4), k1_0)
                    T.reads(x_red_rf[v_ax0, v_ax1, vk1_1], x[v_ax0, vk1_0 * T.int64(8) + vk1_1])
                    T.writes(x_red_rf[v_ax0, v_ax1, vk1_1])
                    x_red_rf[v_ax0, v_ax1, vk1_1] = x_red_rf[v_ax0, v_ax1, vk1_1] + x[v_ax0, vk1_0 * T.int64(8) + vk1_1]
    for ax0_ax1_fused in T.parallel(T.int64(4)):
        for k1_1 in range(T.int64(8)):
            with T.sblock("x_red"):
                vk1_1, v_ax0 = T.axis.remap("RS", [k1_1, ax0_ax1_fused])
                v_ax1 = T.axis.spatial(T.int64(1), T.int64(0))
                T.reads(x_red_rf[v_ax0, v_ax1, vk1_1])
                T.writes(x_red[v_ax0, v_ax1])
                with T.init():
                    x_red[v_ax0, v_ax1] = T.float32(0.0)
                x_red[v_ax0, v_ax1] = x_red[v_ax0, v_ax1] + x_red_rf[v_ax0, v_ax1, vk1_1]
    for ax0_ax1_0_fused in T.parallel(T.int64(16)):
        for ax1_1 in T.vectorized(T.int64(8)):
            with T.sblock("T_divide"):
                v_ax0 = T.axis.spatial(T.int64(4), ax0_ax1_0_fused // T.int64(4))
                v_ax1 = T.axis.spatial(T.int64(32), ax0_ax1_0_fused % T.int64(4) * T.int64(8) + ax1_1)
                T.reads(x[v_ax0, v_ax1], x_red[v_ax0, T.int64(0)])
                T.writes(T_divide[v_ax0, v_ax1])
                T_divide[v_ax0, v_ax1] = x[v_ax0, v_ax1] / x_red[v_ax0, T.int64(0)]

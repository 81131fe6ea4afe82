# ruff: noqa  (TVMScript printed by TVM; kept as printed)
"""Expected output of ``PlainSchedule`` (2 cores, 128-bit vectors) for ``reductions.elementwise``
and ``fused.sum_divide``: outer spatial loops fused and parallel, inner spatial loop vectorised,
each block in its own loop nest."""

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
    for ax0_ax1_fused in T.parallel(T.int64(4)):
        for k1 in range(T.int64(32)):
            with T.sblock("x_red"):
                v_ax0 = T.axis.spatial(T.int64(4), ax0_ax1_fused)
                v_ax1 = T.axis.spatial(T.int64(1), T.int64(0))
                v_k1 = T.axis.reduce(T.int64(32), k1)
                with T.init():
                    x_red[v_ax0, v_ax1] = T.float32(0.0)
                x_red[v_ax0, v_ax1] = x_red[v_ax0, v_ax1] + x[v_ax0, v_k1]
    for ax0_ax1_0_fused in T.parallel(T.int64(16)):
        for ax1_1 in T.vectorized(T.int64(8)):
            with T.sblock("T_divide"):
                v_ax0 = T.axis.spatial(T.int64(4), ax0_ax1_0_fused // T.int64(4))
                v_ax1 = T.axis.spatial(T.int64(32), ax0_ax1_0_fused % T.int64(4) * T.int64(8) + ax1_1)
                T_divide[v_ax0, v_ax1] = x[v_ax0, v_ax1] / x_red[v_ax0, T.int64(0)]

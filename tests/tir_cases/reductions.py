# ruff: noqa  (TVMScript printed by TVM; kept as printed)
"""Reduction loop nests for the canonical-form tests (APOLLO section 4.1, Listings 3-5)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def listing3(a: T.Buffer((4, 6, 8, 10), "float32"), b: T.Buffer((4, 8), "float32")):
    """Listing 3's reduction ``b(i,k) += a(i,j,k,l)``: reduced along the 2nd and 4th loops."""
    for i, j, k, l in T.grid(4, 6, 8, 10):
        with T.sblock("b"):
            vi, vj, vk, vl = T.axis.remap("SRSR", [i, j, k, l])
            with T.init():
                b[vi, vk] = T.float32(0)
            b[vi, vk] = b[vi, vk] + a[vi, vj, vk, vl]


@T.prim_func(s_tir=True)
def column_sum(a: T.Buffer((16, 8, 32), "float32"), b: T.Buffer((32,), "float32")):
    for j in range(32):
        for i, k in T.grid(16, 8):
            with T.sblock("b"):
                vj, vi, vk = T.axis.remap("SRR", [j, i, k])
                with T.init():
                    b[vj] = T.float32(0)
                b[vj] = b[vj] + a[vi, vk, vj]


@T.prim_func(s_tir=True)
def total_sum(a: T.Buffer((16, 32), "float32"), b: T.Buffer((1,), "float32")):
    for o, i, j in T.grid(1, 16, 32):
        with T.sblock("b"):
            vo, vi, vj = T.axis.remap("SRR", [o, i, j])
            with T.init():
                b[vo] = T.float32(0)
            b[vo] = b[vo] + a[vi, vj]


@T.prim_func(s_tir=True)
def elementwise(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("b"):
            vi = T.axis.spatial(16, i)
            b[vi] = a[vi] * T.float32(2)


@T.prim_func(s_tir=True)
def listing4(a: T.Buffer((4, 6, 8, 10), "float32"), b: T.Buffer((4, 8), "float32")):
    """Listing 4 (y-reduce): ``x in [0, M*P)`` spatial outer, ``y in [0, N*Q)`` reduced inner."""
    for i_k_fused, j_l_fused in T.grid(32, 60):
        with T.sblock("b"):
            vi = T.axis.spatial(4, i_k_fused // 8)
            vj = T.axis.reduce(6, j_l_fused // 10)
            vk = T.axis.spatial(8, i_k_fused % 8)
            vl = T.axis.reduce(10, j_l_fused % 10)
            with T.init():
                b[vi, vk] = T.float32(0)
            b[vi, vk] = b[vi, vk] + a[vi, vj, vk, vl]


@T.prim_func(s_tir=True)
def column_sum_x_reduce(a: T.Buffer((16, 8, 32), "float32"), b: T.Buffer((32,), "float32")):
    for i_k_fused, j in T.grid(128, 32):
        with T.sblock("b"):
            vj = T.axis.spatial(32, j)
            vi = T.axis.reduce(16, i_k_fused // 8)
            vk = T.axis.reduce(8, i_k_fused % 8)
            with T.init():
                b[vj] = T.float32(0)
            b[vj] = b[vj] + a[vi, vk, vj]


@T.prim_func(s_tir=True)
def total_sum_all_reduce(a: T.Buffer((16, 32), "float32"), b: T.Buffer((1,), "float32")):
    for o, i_j_fused in T.grid(1, 512):
        with T.sblock("b"):
            vo = T.axis.spatial(1, o)
            vi = T.axis.reduce(16, i_j_fused // 32)
            vj = T.axis.reduce(32, i_j_fused % 32)
            with T.init():
                b[vo] = T.float32(0)
            b[vo] = b[vo] + a[vi, vj]

"""Scheduled GPU kernels (thread-bound loop nests, as dlight leaves them) for
``GPUParallelStitch``: independent branches, a thread-private chain, a dependence across threads,
and what the pass makes of the first two."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def independent(x: T.Buffer((256,), "float32"), y: T.Buffer((64,), "float32"),
                a: T.Buffer((256,), "float32"), b: T.Buffer((64,), "float32")):
    """Two element-wise branches: 2 blocks of 128 threads, 1 block of 64 threads."""
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            with T.sblock("double"):
                v = T.axis.spatial(256, bx * 128 + tx)
                a[v] = x[v] * T.float32(2.0)
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.sblock("negate"):
                v = T.axis.spatial(64, bx * 64 + tx)
                b[v] = T.float32(0.0) - y[v]


@T.prim_func(s_tir=True)
def independent_stitched(x: T.Buffer((256,), "float32"), y: T.Buffer((64,), "float32"),
                         a: T.Buffer((256,), "float32"), b: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(3, thread="blockIdx.x"):
        if bx < 2:
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                with T.sblock("double"):
                    v = T.axis.spatial(256, bx * 128 + tx)
                    a[v] = x[v] * T.float32(2.0)
        if 2 <= bx < 3:
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                if tx < 64:
                    with T.sblock("negate"):
                        v = T.axis.spatial(64, (bx - 2) * 64 + tx)
                        b[v] = T.float32(0.0) - y[v]


@T.prim_func(s_tir=True)
def row_sum_then_scale(x: T.Buffer((256, 8), "float32"), out: T.Buffer((256,), "float32")):
    """A per-thread row sum into an intermediate, then a division by the row length that each
    thread applies to its own row: the dependence stays inside each thread."""
    total = T.sblock_alloc_buffer((256,))
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            for k in range(8):
                with T.sblock("sum"):
                    v = T.axis.spatial(256, bx * 128 + tx)
                    r = T.axis.reduce(8, k)
                    with T.init():
                        total[v] = T.float32(0.0)
                    total[v] = total[v] + x[v, r]
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            with T.sblock("mean"):
                v = T.axis.spatial(256, bx * 128 + tx)
                out[v] = total[v] / T.float32(8.0)


@T.prim_func(s_tir=True)
def row_sum_then_scale_stitched(x: T.Buffer((256, 8), "float32"), out: T.Buffer((256,), "float32")):
    total = T.sblock_alloc_buffer((256,), scope="local")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            for k in range(8):
                with T.sblock("sum"):
                    v = T.axis.spatial(256, bx * 128 + tx)
                    r = T.axis.reduce(8, k)
                    with T.init():
                        total[v] = T.float32(0.0)
                    total[v] = total[v] + x[v, r]
            with T.sblock("mean"):
                v = T.axis.spatial(256, bx * 128 + tx)
                out[v] = total[v] / T.float32(8.0)


@T.prim_func(s_tir=True)
def reversed_dependence(x: T.Buffer((256,), "float32"), out: T.Buffer((256,), "float32")):
    """The second nest reads the intermediate in reverse: thread t needs what thread 255 - t wrote
    in another block, so the two nests must stay two launches."""
    mid = T.sblock_alloc_buffer((256,))
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            with T.sblock("square"):
                v = T.axis.spatial(256, bx * 128 + tx)
                mid[v] = x[v] * x[v]
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            with T.sblock("reverse"):
                v = T.axis.spatial(256, bx * 128 + tx)
                out[v] = mid[255 - v]


@T.prim_func(s_tir=True)
def block_reduction_beside_copy(x: T.Buffer((4, 256), "float32"), y: T.Buffer((64,), "float32"),
                                total: T.Buffer((4,), "float32"), b: T.Buffer((64,), "float32")):
    """A cross-thread row sum on 256 threads beside a copy on 64: independent, but the copy's
    threads would need a guard and the reduction's do not, so only the copy may be guarded."""
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            with T.sblock("row_sum"):
                v = T.axis.spatial(4, bx)
                r = T.axis.reduce(256, tx)
                with T.init():
                    total[v] = T.float32(0.0)
                total[v] = total[v] + x[v, r]
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            with T.sblock("copy"):
                v = T.axis.spatial(64, tx)
                b[v] = y[v]


@T.prim_func(s_tir=True)
def copy_beside_block_reduction(x: T.Buffer((4, 256), "float32"), y: T.Buffer((256,), "float32"),
                                total: T.Buffer((4,), "float32"), b: T.Buffer((256,), "float32")):
    """The same branches with the reduction on 64 threads and the copy on 256: the reduction would
    need a thread guard around its barrier, so the pass declines."""
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            with T.sblock("copy"):
                v = T.axis.spatial(256, tx)
                b[v] = y[v]
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            for k in range(4):
                with T.sblock("row_sum"):
                    v = T.axis.spatial(4, bx)
                    r = T.axis.reduce(256, tx * 4 + k)
                    with T.init():
                        total[v] = T.float32(0.0)
                    total[v] = total[v] + x[v, r]

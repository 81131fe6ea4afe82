"""Hand-scheduled DSA kernels whose traffic and cycles are derived on paper in test_dsa_simulator.py."""

from tvm.script import tirx as T

TILE = {"dsa.tile": 1, "dsa.cores": 2, "dsa.double_buffer": 1}
TILE_SINGLE = {"dsa.tile": 1, "dsa.cores": 2, "dsa.double_buffer": 0}


def _gemm_tiled(nested: bool):
    """C = A @ B; 4 output tiles of 32x32, K staged into LB in 2 chunks of 64 (double-buffered).
    ``nested``: each chunk's product computed in a loop of 2 column halves, each a sequence of
    two blocks (the tile's upper and lower 16 rows)."""

    @T.prim_func(s_tir=True)
    def gemm(A: T.Buffer((64, 128), "float32"), B: T.Buffer((128, 64), "float32"),
             C: T.Buffer((64, 64), "float32")):
        A_lb = T.sblock_alloc_buffer((64, 128), "float32", scope="local.dsa_lb")
        B_lb = T.sblock_alloc_buffer((128, 64), "float32", scope="local.dsa_lb")
        C_lb = T.sblock_alloc_buffer((64, 64), "float32", scope="local.dsa_lb")
        for t in T.serial(4, annotations=TILE):
            for ko in range(2):
                for i, k in T.grid(32, 64):
                    with T.sblock("A_lb"):
                        vi = T.axis.spatial(64, t // 2 * 32 + i)
                        vk = T.axis.spatial(128, ko * 64 + k)
                        A_lb[vi, vk] = A[vi, vk]
                for k, j in T.grid(64, 32):
                    with T.sblock("B_lb"):
                        vk = T.axis.spatial(128, ko * 64 + k)
                        vj = T.axis.spatial(64, t % 2 * 32 + j)
                        B_lb[vk, vj] = B[vk, vj]
                if nested:
                    for jo in range(2):
                        for i, j, k in T.grid(16, 16, 64):
                            with T.sblock("mm_upper"):
                                vi = T.axis.spatial(64, t // 2 * 32 + i)
                                vj = T.axis.spatial(64, t % 2 * 32 + jo * 16 + j)
                                vk = T.axis.reduce(128, ko * 64 + k)
                                with T.init():
                                    C_lb[vi, vj] = T.float32(0)
                                C_lb[vi, vj] = C_lb[vi, vj] + A_lb[vi, vk] * B_lb[vk, vj]
                        for i, j, k in T.grid(16, 16, 64):
                            with T.sblock("mm_lower"):
                                vi = T.axis.spatial(64, t // 2 * 32 + 16 + i)
                                vj = T.axis.spatial(64, t % 2 * 32 + jo * 16 + j)
                                vk = T.axis.reduce(128, ko * 64 + k)
                                with T.init():
                                    C_lb[vi, vj] = T.float32(0)
                                C_lb[vi, vj] = C_lb[vi, vj] + A_lb[vi, vk] * B_lb[vk, vj]
                else:
                    for i, j, k in T.grid(32, 32, 64):
                        with T.sblock("mm"):
                            vi = T.axis.spatial(64, t // 2 * 32 + i)
                            vj = T.axis.spatial(64, t % 2 * 32 + j)
                            vk = T.axis.reduce(128, ko * 64 + k)
                            with T.init():
                                C_lb[vi, vj] = T.float32(0)
                            C_lb[vi, vj] = C_lb[vi, vj] + A_lb[vi, vk] * B_lb[vk, vj]
            for i, j in T.grid(32, 32):
                with T.sblock("C"):
                    vi = T.axis.spatial(64, t // 2 * 32 + i)
                    vj = T.axis.spatial(64, t % 2 * 32 + j)
                    C[vi, vj] = C_lb[vi, vj]

    return gemm


gemm_tiled = _gemm_tiled(nested=False)
gemm_tiled_nested = _gemm_tiled(nested=True)


@T.prim_func(s_tir=True)
def ew_chain(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64, 256), "float32"),
             D: T.Buffer((64, 256), "float32")):
    """D = max(A * B + 1, 0) in 4 row tiles of 16; the product stays in LB."""
    A_lb = T.sblock_alloc_buffer((64, 256), "float32", scope="local.dsa_lb")
    B_lb = T.sblock_alloc_buffer((64, 256), "float32", scope="local.dsa_lb")
    P_lb = T.sblock_alloc_buffer((64, 256), "float32", scope="local.dsa_lb")
    D_lb = T.sblock_alloc_buffer((64, 256), "float32", scope="local.dsa_lb")
    for t in T.serial(4, annotations=TILE_SINGLE):
        for i, j in T.grid(16, 256):
            with T.sblock("A_lb"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(256, j)
                A_lb[vi, vj] = A[vi, vj]
        for i, j in T.grid(16, 256):
            with T.sblock("B_lb"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(256, j)
                B_lb[vi, vj] = B[vi, vj]
        for i, j in T.grid(16, 256):
            with T.sblock("mul"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(256, j)
                P_lb[vi, vj] = A_lb[vi, vj] * B_lb[vi, vj]
        for i, j in T.grid(16, 256):
            with T.sblock("add_relu"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(256, j)
                D_lb[vi, vj] = T.max(P_lb[vi, vj] + T.float32(1), T.float32(0))
        for i, j in T.grid(16, 256):
            with T.sblock("D"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(256, j)
                D[vi, vj] = D_lb[vi, vj]


@T.prim_func(s_tir=True)
def spill_to_gb(A: T.Buffer((64, 512), "float32"), O: T.Buffer((64, 512), "float32")):
    """O = exp(A) * 2 with row tiles for exp and column tiles for the product: exp(A) (128 KB,
    more than an LB) crosses the change of tiling through a GB buffer."""
    E_gb = T.sblock_alloc_buffer((64, 512), "float32", scope="global.dsa_gb")
    A_lb = T.sblock_alloc_buffer((64, 512), "float32", scope="local.dsa_lb")
    E_lb = T.sblock_alloc_buffer((64, 512), "float32", scope="local.dsa_lb")
    F_lb = T.sblock_alloc_buffer((64, 512), "float32", scope="local.dsa_lb")
    O_lb = T.sblock_alloc_buffer((64, 512), "float32", scope="local.dsa_lb")
    for t in T.serial(4, annotations=TILE_SINGLE):
        for i, j in T.grid(16, 512):
            with T.sblock("A_lb"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(512, j)
                A_lb[vi, vj] = A[vi, vj]
        for i, j in T.grid(16, 512):
            with T.sblock("exp"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(512, j)
                E_lb[vi, vj] = T.exp(A_lb[vi, vj])
        for i, j in T.grid(16, 512):
            with T.sblock("E_gb"):
                vi = T.axis.spatial(64, t * 16 + i)
                vj = T.axis.spatial(512, j)
                E_gb[vi, vj] = E_lb[vi, vj]
    for t in T.serial(4, annotations=TILE_SINGLE):
        for i, j in T.grid(64, 128):
            with T.sblock("F_lb"):
                vi = T.axis.spatial(64, i)
                vj = T.axis.spatial(512, t * 128 + j)
                F_lb[vi, vj] = E_gb[vi, vj]
        for i, j in T.grid(64, 128):
            with T.sblock("scale"):
                vi = T.axis.spatial(64, i)
                vj = T.axis.spatial(512, t * 128 + j)
                O_lb[vi, vj] = F_lb[vi, vj] * T.float32(2)
        for i, j in T.grid(64, 128):
            with T.sblock("O"):
                vi = T.axis.spatial(64, i)
                vj = T.axis.spatial(512, t * 128 + j)
                O[vi, vj] = O_lb[vi, vj]


@T.prim_func(s_tir=True)
def gemm_beside_scale(A: T.Buffer((128, 32), "float32"), B: T.Buffer((32, 32), "float32"),
                      X: T.Buffer((128, 64), "float32"), C: T.Buffer((128, 32), "float32"),
                      Y: T.Buffer((128, 64), "float32")):
    """C = A @ B on the matrix unit (one 32x32x32 MME call per tile) and, independent of it,
    Y = exp(X) * 2 on the vector unit; 4 row tiles of 32, double-buffered."""
    A_lb = T.sblock_alloc_buffer((128, 32), "float32", scope="local.dsa_lb")
    B_lb = T.sblock_alloc_buffer((32, 32), "float32", scope="local.dsa_lb")
    C_lb = T.sblock_alloc_buffer((128, 32), "float32", scope="local.dsa_lb")
    X_lb = T.sblock_alloc_buffer((128, 64), "float32", scope="local.dsa_lb")
    Y_lb = T.sblock_alloc_buffer((128, 64), "float32", scope="local.dsa_lb")
    for t in T.serial(4, annotations=TILE):
        for i, k in T.grid(32, 32):
            with T.sblock("A_lb"):
                vi = T.axis.spatial(128, t * 32 + i)
                vk = T.axis.spatial(32, k)
                A_lb[vi, vk] = A[vi, vk]
        for k, j in T.grid(32, 32):
            with T.sblock("B_lb"):
                vk, vj = T.axis.remap("SS", [k, j])
                B_lb[vk, vj] = B[vk, vj]
        for i, j in T.grid(32, 64):
            with T.sblock("X_lb"):
                vi = T.axis.spatial(128, t * 32 + i)
                vj = T.axis.spatial(64, j)
                X_lb[vi, vj] = X[vi, vj]
        with T.sblock("mme"):
            vt = T.axis.spatial(4, t)
            T.reads(A_lb[vt * 32:vt * 32 + 32, 0:32], B_lb[0:32, 0:32])
            T.writes(C_lb[vt * 32:vt * 32 + 32, 0:32])
            T.evaluate(T.call_extern("int32", "dsa_mme_gemm_f32",
                                     C_lb.access_ptr("w", offset=vt * 1024),
                                     A_lb.access_ptr("r", offset=vt * 1024), B_lb.access_ptr("r"),
                                     32, 32, 32, 32, 32, 32))
        for i, j in T.grid(32, 64):
            with T.sblock("scale"):
                vi = T.axis.spatial(128, t * 32 + i)
                vj = T.axis.spatial(64, j)
                Y_lb[vi, vj] = T.exp(X_lb[vi, vj]) * T.float32(2)
        for i, j in T.grid(32, 32):
            with T.sblock("C"):
                vi = T.axis.spatial(128, t * 32 + i)
                vj = T.axis.spatial(32, j)
                C[vi, vj] = C_lb[vi, vj]
        for i, j in T.grid(32, 64):
            with T.sblock("Y"):
                vi = T.axis.spatial(128, t * 32 + i)
                vj = T.axis.spatial(64, j)
                Y[vi, vj] = Y_lb[vi, vj]



def _promoted(ahead: int):
    """Y = X * W1 + W2 (elementwise) in two phases, the weights promoted into GB at the start of
    the kernel in one loop (double buffered with ``ahead``: issued ahead of the layers); the
    first phase reads W1 only, the second W2 only."""

    @T.prim_func(s_tir=True)
    def promoted(X: T.Buffer((800,), "float32"), W1: T.Buffer((800,), "float32"),
                 W2: T.Buffer((6400,), "float32"), Y: T.Buffer((6400,), "float32")):
        W1_gb = T.sblock_alloc_buffer((800,), "float32", scope="global.dsa_gb")
        W2_gb = T.sblock_alloc_buffer((6400,), "float32", scope="global.dsa_gb")
        P_gb = T.sblock_alloc_buffer((800,), "float32", scope="global.dsa_gb")
        for c in T.serial(1, annotations={"dsa.tile": 1, "dsa.cores": 1, "dsa.double_buffer": ahead}):
            for i in range(800):
                with T.sblock("W1_gb"):
                    vi = T.axis.spatial(800, c * 800 + i)
                    W1_gb[vi] = W1[vi]
            for i in range(6400):
                with T.sblock("W2_gb"):
                    vi = T.axis.spatial(6400, c * 6400 + i)
                    W2_gb[vi] = W2[vi]
        for t in T.serial(1, annotations={"dsa.tile": 1, "dsa.cores": 1, "dsa.double_buffer": 1}):
            for i in range(800):
                with T.sblock("scale"):
                    vi = T.axis.spatial(800, t * 800 + i)
                    P_gb[vi] = X[vi] * W1_gb[vi]
        for t in T.serial(1, annotations={"dsa.tile": 1, "dsa.cores": 1, "dsa.double_buffer": 1}):
            for i in range(6400):
                with T.sblock("shift"):
                    vi = T.axis.spatial(6400, t * 6400 + i)
                    Y[vi] = P_gb[vi % 800] + W2_gb[vi]

    return promoted


promoted_ahead = _promoted(1)
promoted_in_order = _promoted(0)

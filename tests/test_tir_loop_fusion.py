"""AnchorLoopFusion (GraphTurbo section 4.1, APOLLO section 4.2 stitching) on fused PrimFuncs.

Before: ``tir_cases/fused.py`` (stock FuseOps + FuseTIR output). Expected: ``tir_cases/
fused_expected.py`` under ``FAKE_SPEC`` (2 cores, 128-bit vectors, 2 KiB fast memory, 1 KiB L1),
which forces real tiling and reduction blocking on these small shapes.
"""

import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from tir_cases import fused, fused_expected
from tvm import relax, s_tir
from tvm.script import tirx as T

from tvm_fusion_ext.hardware import CPUSpec, HardwareSpec
from tvm_fusion_ext.tir_passes import AnchorLoopFusion
from tvm_fusion_ext.tir_passes.analysis import (
    analyze_blocks,
    choose_tile,
    lowered_allocations,
    pick_anchor,
    sblocks,
    tile_footprint,
    uses_any,
)
from tvm_fusion_ext.tir_passes.default_schedule import default_rules

FAKE_SPEC = CPUSpec("fake", num_cores=2, vector_bytes=16, fast_memory_bytes=2048, vector_registers=16,
                    l1_bytes=1024)
CASES = ["conv2d_bias_relu", "conv2d_7x7_bias_relu", "matmul_bias_gelu", "matmul_nt_bias", "softmax",
         "layer_norm", "sum_divide"]


AVX2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024, vector_registers=16,
               l1_bytes=32 * 1024, l2_bytes=512 * 1024)


def _fused_kernel(mod):
    """The one PrimFunc of ``mod`` after stock FuseOps + FuseTIR."""
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
        relax.transform.LegalizeOps()(mod))))
    return next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def _schedule(name, spec=FAKE_SPEC):
    sch = AnchorLoopFusion(spec).apply(getattr(fused, name), tvm.target.Target("llvm"), False)
    assert sch is not None
    return sch.mod["main"]


def _infos(func):
    return [info for _, info in analyze_blocks(s_tir.Schedule(func))]


@pytest.mark.parametrize("name, anchor", [
    ("conv2d_bias_relu", "conv2d_nchw"), ("conv2d_7x7_bias_relu", "conv2d_nchw"),
    ("matmul_bias_gelu", "matmul"), ("matmul_nt_bias", "matmul"),
    ("softmax", "T_softmax_norm"), ("layer_norm", "T_layer_norm"), ("sum_divide", "T_divide"),
    ("layer_norm_copy", "T_layer_norm"),  # the normalisation, not the copy after it
])
def test_anchor_is_contraction_else_last_block(name, anchor):
    infos = _infos(getattr(fused, name))
    assert infos[pick_anchor(infos)].name == anchor


def test_tile_is_largest_divisor_fitting_fast_memory():
    matmul = _infos(fused.matmul_bias_gelu)[0]  # loops (i0=16, i1=16, k=32)
    tile = choose_tile(matmul, [0, 1], {0: 4, 1: 8}, FAKE_SPEC)
    assert tile == {0: 4, 1: 8}
    assert tile_footprint(matmul, tile) <= FAKE_SPEC.fast_memory_bytes
    assert tile_footprint(matmul, {0: 4, 1: 16}) > FAKE_SPEC.fast_memory_bytes
    roomy = HardwareSpec("roomy", num_cores=1, vector_bytes=16, fast_memory_bytes=1 << 20)
    assert choose_tile(matmul, [0, 1], {0: 4, 1: 8}, roomy) == {0: 16, 1: 16}
    # enough tiles for every core, even when everything fits
    assert choose_tile(matmul, [0, 1], {0: 4, 1: 8}, HardwareSpec("wide", 4, 16, 1 << 20)) == \
        {0: 4, 1: 16}


@pytest.mark.parametrize("name", CASES)
def test_schedule_matches_expected(name):
    tvm.ir.assert_structural_equal(_schedule(name), getattr(fused_expected, name))


def _conv2d_bias_relu(x, w, b):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return np.maximum(np.einsum("nchwij,fcij->nfhw", windows, w) + b, 0)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b


REFERENCES = {
    "conv2d_bias_relu": _conv2d_bias_relu,
    "conv2d_7x7_bias_relu": _conv2d_bias_relu,
    "matmul_bias_gelu": lambda x, w, b: _gelu(x @ w + b),
    "matmul_nt_bias": lambda x, w, b: x @ w.T + b,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "sum_divide": lambda x: x / x.sum(-1, keepdims=True),
}


@pytest.mark.parametrize("name", CASES)
def test_scheduled_kernel_matches_numpy(name):
    func = _schedule(name).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    inputs = [rng.uniform(0.1, 1.0, s).astype("float32") for s in shapes[:-1]]
    out = tvm.runtime.empty(shapes[-1], "float32")
    lib["main"](*[tvm.runtime.tensor(a) for a in inputs], out)
    np.testing.assert_allclose(out.numpy(), REFERENCES[name](*inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["conv2d_bias_relu", "conv2d_7x7_bias_relu", "matmul_nt_bias", "softmax",
                                  "layer_norm", "sum_divide"])
def test_no_full_size_intermediate_remains(name):
    """Every intermediate, and every per-tile copy of a packed operand, is local and smaller
    than the tensor it holds a tile of."""
    func = getattr(fused, name)
    full = {**lowered_allocations(func),
            **{p.name: ([int(d) for d in p.ty.shape], "global") for p in func.params}}
    after = lowered_allocations(_schedule(name))
    assert after, "every case has intermediates"
    for buf, (shape, scope) in after.items():
        assert scope == "local"
        if buf.endswith(".rf_local"):  # a row reduction's partial results: one vector per row
            assert math.prod(shape) <= 2 * FAKE_SPEC.vector_lanes("float32"), (buf, shape)
            continue
        whole = full[buf.removesuffix("_local")][0]
        assert math.prod(shape) < math.prod(whole), (buf, shape, whole)


def test_rows_become_one_loop_nest_with_scalar_intermediates():
    """Softmax / layer norm (APOLLO 4.2): per-row reductions leave one element per row, and one
    vector of per-lane partial results (``.rf``) per row while reducing it."""
    lanes = FAKE_SPEC.vector_lanes("float32")
    for name in ("softmax", "layer_norm", "sum_divide"):
        after = lowered_allocations(_schedule(name))
        reduced = {b: s for b, (s, _) in after.items() if "exp_local" not in b and ".rf" not in b}
        assert all(math.prod(shape) == 1 for shape in reduced.values()), reduced
        partials = {b: s for b, (s, _) in after.items() if ".rf" in b}
        assert partials and all(math.prod(shape) in (lanes, 2 * lanes) for shape in partials.values()), partials


@pytest.mark.parametrize("columns, vectorized", [(32, True), (37, False)])
def test_row_reductions_are_vectorised_along_the_row(columns, vectorized):
    """A row reduction read contiguously becomes a vectorised per-lane partial reduction plus a
    write-back over the lanes, when the row holds whole vectors; a prime row length keeps the
    scalar reduction (a predicated tail would not survive ``compute_at``). Both are right."""
    func = _row_softmax(columns)
    sch = AnchorLoopFusion(FAKE_SPEC).apply(func, tvm.target.Target("llvm"), False)
    names = [b.name_hint for b in sblocks(sch.mod["main"])]
    partial_loops = [loop for loop in _loops_of(sch.mod["main"], "T_softmax_expsum_rf_update")]
    assert ("T_softmax_expsum_rf_update" in names) == vectorized
    if vectorized:
        assert partial_loops[-1].kind == tvm.tirx.ForKind.VECTORIZED
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target="llvm")
    x = np.random.default_rng(0).normal(size=(6, columns)).astype("float32")
    out = tvm.runtime.empty((6, columns), "float32")
    lib["main"](tvm.runtime.tensor(x), out)
    expected = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), expected / expected.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def _row_softmax(columns: int) -> tvm.tirx.PrimFunc:
    x = relax.Var("x", relax.TensorType((6, columns), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.softmax(x, axis=-1))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    return next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def _loops_of(func: tvm.tirx.PrimFunc, block: str) -> list:
    """The loops around block ``block``, outermost first."""
    found = []

    def visit(stmt, loops):
        if isinstance(stmt, tvm.tirx.For):
            visit(stmt.body, [*loops, stmt])
        elif isinstance(stmt, tvm.tirx.SeqStmt):
            for child in stmt.seq:
                visit(child, loops)
        elif isinstance(stmt, tvm.s_tir.SBlockRealize):
            if stmt.block.name_hint == block:
                found.extend(loops)
            visit(stmt.block.body, loops)
        elif isinstance(stmt, tvm.s_tir.SBlock):
            visit(stmt.body, loops)

    visit(func.body, [])
    return found


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_row_reduction_is_vectorised_along_its_rows_not_across_them(reduction):
    """``sum(exp(-x), -1)`` (the sum is the anchor, the exp inlined into it) and ``mean(x, -1)``
    (its divide has no loop but the rows, so ``PlainSchedule`` takes it): every vector loop that
    loads ``x`` walks ``x``'s contiguous last axis. Vectorised along the output, each lane would
    load from another row, a gather (softmax's sum ran 5x slower that way)."""
    x = relax.Var("x", relax.TensorType((64, 128), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            value = relax.op.sum(relax.op.exp(relax.op.negative(x)), axis=[-1]) if reduction == "sum" \
                else relax.op.mean(x, axis=[-1])
            out = bb.emit_output(value)
        bb.emit_func_output(out)
    func = _fused_kernel(bb.get())
    target = tvm.target.Target("llvm")
    sch, rule = next((rule.apply(func, target, False), type(rule).__name__)
                     for rule in default_rules(FAKE_SPEC) if rule.apply(func, target, False) is not None)
    assert rule == ("AnchorLoopFusion" if reduction == "sum" else "PlainSchedule")
    loads = _vector_loads(sch.mod["main"], func.params[0].name)
    assert loads, "the reduction of x is vectorised"
    for lane, indices in loads:
        assert uses_any(indices[-1], lane) and not uses_any(indices[0], lane), indices
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target="llvm")
    data = np.random.default_rng(0).uniform(-1, 1, (64, 128)).astype("float32")
    out = tvm.runtime.empty((64,), "float32")
    lib["main"](tvm.runtime.tensor(data), out)
    expected = np.exp(-data).sum(-1) if reduction == "sum" else data.mean(-1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def _vector_loads(func: tvm.tirx.PrimFunc, buffer: str) -> list:
    """``(lane, indices)`` of every load of ``buffer`` in a block under a vectorised loop:
    ``lane`` the block variables bound to the vectorised loop's variable."""
    found = []

    def visit(loop):
        if loop.kind != tvm.tirx.ForKind.VECTORIZED:
            return

        def visit_realize(realize):
            lane = [iv.var for iv, value in zip(realize.block.iter_vars, realize.iter_values)
                    if uses_any(value, [loop.loop_var])]
            tvm_ffi.structural_walk(realize.block.body, [(tvm.ir.TensorLoad, lambda load: found.append(
                (lane, list(load.indices))) if load.source.name == buffer else None)])

        tvm_ffi.structural_walk(loop.body, [(s_tir.SBlockRealize, visit_realize)])

    tvm_ffi.structural_walk(func.body, [(tvm.tirx.For, visit)])
    return found


def test_the_channel_loop_of_a_pointwise_conv_is_not_unrolled_as_its_window():
    """An NHWC 1x1 conv over 16 input channels (MobileNetV2's first expansion): its unit R x S
    loops come first among the reduction loops, so the "window" unrolled was the channel loop,
    and LLVM interleaved all 16 steps of the micro-kernel (676 us against 278 us with the loop
    kept, 112 x 112 x 16 -> 96, Zen 4, 2 threads). The outermost iterating reduction loop carries
    the steps and stays a loop; only window loops inside it are unrolled."""
    x = relax.Var("x", relax.TensorType((1, 28, 28, 16), "float32"))
    w = relax.Var("w", relax.TensorType((1, 1, 16, 96), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO"))
        bb.emit_func_output(out)
    func = _fused_kernel(bb.get())
    avx512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1024 * 1024,
                     vector_registers=32, l1_bytes=32 * 1024, l2_bytes=1024 * 1024)
    sch = AnchorLoopFusion(avx512).apply(func, tvm.target.Target("llvm"), False)
    loops = _loops_of(sch.mod["main"], "conv2d_nhwc_update")
    channels = [loop for loop in loops if loop.loop_var.name.startswith("rc")]
    assert channels and all(loop.kind != tvm.tirx.ForKind.UNROLLED for loop in channels), channels
    assert any(loop.kind == tvm.tirx.ForKind.UNROLLED for loop in loops)  # the micro-kernel's rows


def test_stitched_rows_take_their_copy_and_unit_axes_along():
    """A layer norm whose unit axis a simplifier bound to 0, copied into a second output (APOLLO
    memory stitching after StmtSimplify): one parallel row loop holds every block, each row's
    statistics are scalars, and both outputs are right."""
    func = _schedule("layer_norm_copy").with_attr("global_symbol", "main")
    root = func.body.block.body
    assert isinstance(root, tvm.tirx.For) and root.kind == tvm.tirx.ForKind.PARALLEL
    reduced = {b: s for b, (s, _) in lowered_allocations(func).items() if "T_" not in b and ".rf" not in b}
    assert reduced and all(math.prod(shape) == 1 for shape in reduced.values()), reduced
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    rng = np.random.default_rng(0)
    x, g, b = (rng.uniform(0.1, 1.0, s).astype("float32") for s in ((1, 4, 32), (32,), (32,)))
    norm, copy = tvm.runtime.empty((1, 4, 32), "float32"), tvm.runtime.empty((4, 32), "float32")
    lib["main"](*[tvm.runtime.tensor(a) for a in (x, g, b)], norm, copy)
    np.testing.assert_allclose(norm.numpy(), _layer_norm(x, g, b), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(copy.numpy(), _layer_norm(x, g, b)[0], rtol=1e-4, atol=1e-5)


def test_declines_blocks_declaring_other_regions_than_they_access():
    """TE's concat reads three segments of the conv but declares one; moving it into the conv tile
    would compute one segment per tile (fuzzing regression conv_concat_epilogue_tile)."""
    rule = AnchorLoopFusion(FAKE_SPEC)
    assert rule.apply(fused.conv2d_concat, tvm.target.Target("llvm"), False) is None
    assert "declares other regions" in rule.reason
    assert rule.apply(fused.conv2d_bias_relu, tvm.target.Target("llvm"), False) is not None
    assert rule.reason is None and rule.notes == []


def test_declines_nested_blocks():
    sch = s_tir.Schedule(fused.softmax)
    sch.blockize(sch.get_loops(sch.get_sblock("T_softmax_norm"))[1])
    rule = AnchorLoopFusion(FAKE_SPEC)
    assert rule.apply(sch.mod["main"], tvm.target.Target("llvm"), False) is None
    assert "nested" in rule.reason


def test_a_second_contraction_is_noted_as_a_plain_loop_nest():
    """A group of two chained matmuls gets one register tile; the schedule says which contraction
    it left as a plain loop nest (a note the profitability check can read), and stays right."""
    rule = AnchorLoopFusion(FAKE_SPEC)
    sch = rule.apply(fused.two_matmuls.with_attr("global_symbol", "main"), tvm.target.Target("llvm"), False)
    assert sch is not None and rule.reason is None
    assert len(rule.notes) == 1 and "plain loop nest" in rule.notes[0]
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target="llvm")
    a, w1, w2 = (np.random.default_rng(2).normal(size=s).astype("float32") for s in ((16, 32), (32, 32), (32, 8)))
    out = tvm.runtime.empty((16, 8), "float32")
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(w1), tvm.runtime.tensor(w2), out)
    np.testing.assert_allclose(out.numpy(), a @ w1 @ w2, rtol=1e-4, atol=1e-4)


@T.prim_func(s_tir=True)
def _scale_then_pool(x: T.Buffer((1, 8, 14, 14), "float32"), scaled: T.Buffer((1, 8, 14, 14), "float32"),
                     pooled: T.Buffer((1, 8, 1, 1), "float32")):
    """An activation kept as an output and its global sum pool (EfficientNet's squeeze-excite
    input, as APOLLO's memory stitching groups them)."""
    T.func_attr({"tirx.noalias": True})
    for n, c, h, w in T.grid(1, 8, 14, 14):
        with T.sblock("scale"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            scaled[vn, vc, vh, vw] = x[vn, vc, vh, vw] * T.float32(0.5)
    for n, c, h, w, kh, kw in T.grid(1, 8, 1, 1, 14, 14):
        with T.sblock("pool"):
            vn, vc, vh, vw, vkh, vkw = T.axis.remap("SSSSRR", [n, c, h, w, kh, kw])
            with T.init():
                pooled[vn, vc, vh, vw] = T.float32(0)
            pooled[vn, vc, vh, vw] = pooled[vn, vc, vh, vw] + scaled[vn, vc, vkh, vkw]


def test_global_pool_and_its_input_rows_are_vectorised():
    """A reduction anchor over a whole feature map is factored into vector partials along its
    fused pixels (196 = 49 vectors of 4 under FAKE_SPEC), and the activation before it
    vectorises rows and columns together (14 columns alone hold no whole vector); both right."""
    func = _scale_then_pool.with_attr("global_symbol", "main")
    sch = AnchorLoopFusion(FAKE_SPEC).apply(func, tvm.target.Target("llvm"), False)
    scheduled = sch.mod["main"]
    partial = _loops_of(scheduled, "pool_rf_update")
    assert partial and partial[-1].kind == tvm.tirx.ForKind.VECTORIZED
    assert int(partial[-1].extent) % FAKE_SPEC.vector_lanes("float32") == 0
    scale_loops = _loops_of(scheduled, "scale")
    assert scale_loops[-1].kind == tvm.tirx.ForKind.VECTORIZED
    assert "fused" in scale_loops[-2].loop_var.name or "fused" in scale_loops[-1].loop_var.name
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target="llvm")
    x = np.random.default_rng(1).normal(size=(1, 8, 14, 14)).astype("float32")
    scaled, pooled = tvm.runtime.empty((1, 8, 14, 14), "float32"), tvm.runtime.empty((1, 8, 1, 1), "float32")
    lib["main"](tvm.runtime.tensor(x), scaled, pooled)
    np.testing.assert_allclose(scaled.numpy(), x * 0.5, rtol=1e-6)
    np.testing.assert_allclose(pooled.numpy(), (x * 0.5).sum(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-5)


def test_pointwise_conv_epilogue_runs_in_the_micro_kernel_write_back():
    """A 1x1 conv over 24 channels (MobileNetV2's expansion) reduces whole inside one micro-kernel,
    so its bias + clip epilogue is applied there: the accumulator buffer lowers to one register
    tile (rows x vector width), not to the spatial tile, and the result is exact."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 24, 16, 16), "float32"))
    w = relax.Var("w", relax.TensorType((48, 24, 1, 1), "float32"))
    b = relax.Var("b", relax.TensorType((1, 48, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.clip(relax.op.add(relax.op.nn.conv2d(x, w), b), 0.0, 6.0))
        bb.emit_func_output(y)
    sch = AnchorLoopFusion(AVX2).apply(_fused_kernel(bb.get()), tvm.target.Target("llvm"), False)
    assert sch is not None
    scheduled = sch.mod["main"]
    accumulators = [shape for name, (shape, _) in lowered_allocations(scheduled).items() if "conv2d" in name]
    lanes = AVX2.vector_lanes("float32")
    assert accumulators and all(math.prod(shape) <= AVX2.vector_registers * lanes for shape in accumulators)
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, s).astype("float32") for s in ((1, 24, 16, 16), (48, 24, 1, 1), (1, 48, 1, 1))]
    expected = np.clip(np.einsum("chw,fc->fhw", args[0][0], args[1][:, :, 0, 0])[None] + args[2], 0, 6)
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.empty((1, 48, 16, 16), "float32")
    lib["main"](*[tvm.runtime.tensor(a) for a in args], out)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_broadcasting_epilogue_stays_out_of_the_micro_kernel_write_back():
    """Squeeze-excite's excitation: a 1x1 conv on pooled ``[1, C, 1, 1]`` features whose sigmoid
    scales a whole feature map. Each accumulator feeds H x W outputs, so the epilogue is not moved
    into (and unrolled in) the micro-kernel's write-back, which on EfficientNet-B0's 56 x 56 maps
    made LLVM take minutes per kernel; it runs at the tile loop and the result is exact."""
    bb = relax.BlockBuilder()
    s = relax.Var("s", relax.TensorType((1, 6, 1, 1), "float32"))
    w = relax.Var("w", relax.TensorType((48, 6, 1, 1), "float32"))
    x = relax.Var("x", relax.TensorType((1, 48, 24, 24), "float32"))
    with bb.function("main", [s, w, x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.multiply(x, relax.op.sigmoid(relax.op.nn.conv2d(s, w))))
        bb.emit_func_output(y)
    sch = AnchorLoopFusion(AVX2).apply(_fused_kernel(bb.get()), tvm.target.Target("llvm"), False)
    assert sch is not None
    scheduled = sch.mod["main"]
    unrolled = []
    multiply = sch.get_sblock("T_multiply")
    for rv in sch.get_loops(multiply):
        loop = sch.get(rv)
        if loop.kind == tvm.tirx.ForKind.UNROLLED:
            unrolled.append(int(loop.extent))
    assert math.prod(unrolled) <= AVX2.vector_registers * AVX2.vector_lanes("float32"), unrolled
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, shape).astype("float32") for shape in ((1, 6, 1, 1), (48, 6, 1, 1), (1, 48, 24, 24))]
    gate = 1 / (1 + np.exp(-np.einsum("c,fc->f", args[0][0, :, 0, 0], args[1][:, :, 0, 0])))
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.empty((1, 48, 24, 24), "float32")
    lib["main"](*[tvm.runtime.tensor(a) for a in args], out)
    np.testing.assert_allclose(out.numpy(), args[2] * gate[None, :, None, None], rtol=1e-5, atol=1e-5)


def test_a_gate_read_by_every_pixel_is_computed_once_per_channel():
    """Squeeze-excite's gate ``sigmoid(conv(s, w) + b)`` scales a whole 24 x 24 map. Inlined into
    the scale it would be evaluated for every pixel (576 sigmoids per channel); the schedule keeps
    it as a block of 48 points in the anchor's write-back, and the scale only multiplies."""
    bb = relax.BlockBuilder()
    s = relax.Var("s", relax.TensorType((1, 6, 1, 1), "float32"))
    w = relax.Var("w", relax.TensorType((48, 6, 1, 1), "float32"))
    b = relax.Var("b", relax.TensorType((1, 48, 1, 1), "float32"))
    x = relax.Var("x", relax.TensorType((1, 48, 24, 24), "float32"))
    with bb.function("main", [s, w, b, x]):
        with bb.dataflow():
            gate = relax.op.sigmoid(relax.op.add(relax.op.nn.conv2d(s, w), b))
            y = bb.emit_output(relax.op.multiply(x, gate))
        bb.emit_func_output(y)
    sch = AnchorLoopFusion(AVX2).apply(_fused_kernel(bb.get()), tvm.target.Target("llvm"), False)
    assert sch is not None
    scheduled = sch.mod["main"]
    math_ops = {tvm.ir.Op.get("tirx.sigmoid"), tvm.ir.Op.get("tirx.exp")}

    def evaluates_gate(block) -> bool:
        calls = []
        tvm_ffi.structural_walk(block.body, [(tvm.ir.Call, calls.append)])
        return any(any(call.op.same_as(op) for op in math_ops) for call in calls)

    gates = [block for block in sblocks(scheduled) if block.name_hint != "root" and evaluates_gate(block)]
    assert gates and all(math.prod(int(iv.dom.extent) for iv in g.iter_vars) == 48 for g in gates)
    assert all(g.name_hint != "T_multiply" for g in gates)
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, shape).astype("float32")
            for shape in ((1, 6, 1, 1), (48, 6, 1, 1), (1, 48, 1, 1), (1, 48, 24, 24))]
    logits = np.einsum("c,fc->f", args[0][0, :, 0, 0], args[1][:, :, 0, 0]) + args[2][0, :, 0, 0]
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.empty((1, 48, 24, 24), "float32")
    lib["main"](*[tvm.runtime.tensor(a) for a in args], out)
    np.testing.assert_allclose(out.numpy(), args[3] / (1 + np.exp(-logits))[None, :, None, None], rtol=1e-5, atol=1e-5)


def _max_pool(shape=(1, 8, 16, 16)):
    """A 3x3 max pooling of stride 2 with padding 1 (ResNet's stem), as ``LegalizeOps`` writes it:
    a padding block and the pooling reduction writing the kernel's output."""
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1)))
        bb.emit_func_output(out)
    return _fused_kernel(bb.get()).with_attr("global_symbol", "main")


def test_a_pooling_is_a_windowed_reduction_and_a_conv_or_a_row_sum_is_not():
    pool = {info.name: info for info in _infos(_max_pool())}
    assert pool["pool_max"].is_windowed and not pool["pad_temp"].is_windowed
    assert not any(info.is_windowed for name in ("conv2d_bias_relu", "sum_divide")
                   for info in _infos(getattr(fused, name)))


def test_a_pooling_runs_a_row_at_a_time_into_a_local_accumulator():
    """A max pooling writing the kernel's output accumulates each output row in a local buffer,
    its padded input computed a few rows at a time before it, and a vectorised copy writes the
    row out: the window's strided reads stay scalar instead of one vector load per lane."""
    func = _max_pool()
    scheduled = AnchorLoopFusion(FAKE_SPEC).apply(func, tvm.target.Target("llvm"), False).mod["main"]
    after = lowered_allocations(scheduled)
    assert {scope for _, scope in after.values()} == {"local"}
    assert after["pool_max_local"][0] == [1, 1, 1, 8]  # one output row
    # the three padded input rows it reads (17 of 18 columns: no stride-2 window reaches the last)
    assert after["pad_temp_local"][0] == [1, 1, 3, 17]
    # cache_write's copy block ("pool_max_local") writes the output, "pool_max" the local rows
    assert _loops_of(scheduled, "pool_max_local")[-1].kind == tvm.tirx.ForKind.VECTORIZED
    assert all(loop.kind != tvm.tirx.ForKind.VECTORIZED for loop in _loops_of(scheduled, "pool_max"))
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target="llvm")
    x = np.random.default_rng(2).normal(size=(1, 8, 16, 16)).astype("float32")
    out = tvm.runtime.empty((1, 8, 8, 8), "float32")
    lib["main"](tvm.runtime.tensor(x), out)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(out.numpy(), windows.max(axis=(-2, -1)))

"""Register-tile plans of contraction anchors (register_tile.py): which loop is vectorised, which
operand is packed, micro-kernel shape, reduction block and spatial tile, on zoo-sized shapes for a
2-core AVX2 machine (16 vector registers, 32 KiB L1, 512 KiB L2)."""

import pytest
import tvm
from tvm import relax, s_tir
from tvm.script import tirx as T

from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.tir_passes.analysis import analyze_blocks, pick_anchor, uses_any
from tvm_fusion_ext.tir_passes.register_tile import (
    WINDOW_HEADROOM,
    has_window,
    plan_register_tile,
    registers_needed,
)

AVX2 = CPUSpec("avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024, vector_registers=16,
               l1_bytes=32 * 1024, l2_bytes=512 * 1024)


def _anchor(op, *shapes, **attrs):
    """The anchor block of ``op`` on float32 inputs of ``shapes``, as ``LegalizeOps`` writes it."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(op(*params, **attrs)))
    mod = relax.transform.LegalizeOps()(bb.get())
    func = next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    infos = [info for _, info in analyze_blocks(s_tir.Schedule(func))]
    return infos[pick_anchor(infos)]


def _conv(shape, weight, stride=1, padding=0, groups=1):
    return _anchor(relax.op.nn.conv2d, shape, weight, strides=stride, padding=padding, groups=groups)


def _matmul(a, b):
    return _anchor(relax.op.matmul, a, b)


def test_bert_ffn_matmul_is_a_gotoblas_kernel():
    """128 x 3072 x 768: 4 x 3 vectors of the contiguous output column, K blocked to fit L1,
    a tile of every row and 192 columns (the weight is streamed once). The weight is packed at
    compile time (``prepacked``), so its panel is contiguous."""
    anchor = _matmul((128, 3072), (3072, 768))
    plan = plan_register_tile(anchor, AVX2, prepacked=[anchor.operand_reads[1].source])
    assert (plan.vector, plan.vectors, plan.register, plan.rows) == (1, 3, 0, 4)
    assert plan.packed == () and not plan.transposed
    assert plan.reduce_block == {2: 128}
    assert plan.tile == {0: 128, 1: 192}
    # read in place, each 96-byte row of a 24-column panel starts 32-byte aligned: 128 bytes of lines
    assert plan_register_tile(anchor, AVX2).reduce_block == {2: 96}


def test_nchw_conv_with_28_columns_vectorises_output_channels():
    """28 columns are no multiple of 8 lanes: vectorise the output channel, pack the weight,
    keep the accumulator transposed, reuse each weight vector over 4 columns."""
    anchor = _conv((1, 64, 28, 28), (64, 64, 3, 3), padding=1)
    plan = plan_register_tile(anchor, AVX2)
    assert (anchor.loop_iters[plan.vector].var.name, plan.vectors) == ("v_ff", 2)
    assert (anchor.loop_iters[plan.register].var.name, plan.rows) == ("v_xx", 4)
    assert plan.transposed and [anchor.operand_reads[i].source.name for i in plan.packed] == ["x1"]
    assert plan.reduce_block == {4: 16, 5: 3, 6: 3}  # 16 channels x 3 x 3 window per L1 panel


def test_short_reduction_keeps_the_output_layout():
    """A 1x1 conv over 16 channels: a transposed accumulator's epilogue would cost more than the
    16-step reduction, so the contiguous output column is vectorised (weights broadcast)."""
    anchor = _conv((1, 16, 112, 112), (96, 16, 1, 1))
    plan = plan_register_tile(anchor, AVX2)
    assert anchor.loop_iters[plan.vector].var.name == "v_xx"
    assert not plan.transposed and plan.packed == ()
    assert anchor.loop_iters[plan.register].var.name == "v_ff"


def test_strided_conv_cannot_stream_the_input_row():
    anchor = _conv((1, 64, 56, 56), (128, 64, 1, 1), stride=2)
    plan = plan_register_tile(anchor, AVX2)
    assert anchor.loop_iters[plan.vector].var.name == "v_ff" and plan.transposed


@pytest.mark.parametrize("hw, planned", [(112, True), (14, False)])
def test_depthwise_conv(hw, planned):
    """Depthwise: both operands use the channel, so only the column can be vectorised (no
    register loop: every operand walked by it also uses every other spatial loop); the 3 x 3
    window keeps WINDOW_HEADROOM registers free, so 7 vectors (15 registers) no longer fit 16."""
    anchor = _conv((1, 32, hw, hw), (32, 1, 3, 3), padding=1, groups=32)
    plan = plan_register_tile(anchor, AVX2)
    if not planned:
        assert plan is None
        return
    assert anchor.loop_iters[plan.vector].var.name == "v_xx"
    assert plan.register is None and plan.rows == 1 and plan.vectors == 2  # 16 of 112 columns


@pytest.mark.parametrize("batch", [1, 8])
def test_nhwc_depthwise_conv_reuses_its_weight_over_a_row_of_outputs(batch):
    """NHWC depthwise on maps whose image fits the cores' L2 (the batch counts no more than one
    image): every operand is contiguous along the channels, which are vectorised; the register
    loop is one the weight does not walk (the output columns), so each weight vector is loaded
    once per window step for ``rows`` accumulators in registers, and the input, walked by every
    loop, is loaded per row."""
    anchor = _anchor(relax.op.nn.conv2d, (batch, 14, 14, 96), (3, 3, 1, 96), padding=1,
                     groups=96, data_layout="NHWC", kernel_layout="HWIO")
    plan = plan_register_tile(anchor, AVX2)
    assert anchor.loop_iters[plan.vector].var.name == "v_ff" and plan.packed == ()
    register = anchor.loop_iters[plan.register].var
    assert register.name in ("v_nn", "v_xx", "v_yy") and plan.rows > 1
    assert not any(uses_any(rg.min, [register]) for rg in anchor.operand_reads[1].region)  # the weight
    # accumulators and as many input vectors (the window's steps share them) fit the registers
    assert plan.rows * plan.vectors * 2 + plan.vectors + WINDOW_HEADROOM <= AVX2.vector_registers


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("lanes", [None, 4])
def test_nhwc_depthwise_conv_never_vectorises_its_batch(batch, lanes):
    """A register tile of an NHWC depthwise conv, when it gets one, is along its channels with
    nothing packed: at batch 8 a batch loop vectorised instead (8 lanes, unused by the weight)
    would pack the input per channel at every tile (5 GFLOP/s on MobileNetV2's depthwise convs)."""
    anchor = _anchor(relax.op.nn.conv2d, (batch, 14, 14, 96), (3, 3, 1, 96), padding=1,
                     groups=96, data_layout="NHWC", kernel_layout="HWIO")
    plan = plan_register_tile(anchor, AVX2, lanes=lanes)
    assert plan is None or (anchor.loop_iters[plan.vector].var.name == "v_ff" and plan.packed == ())


def test_nhwc_depthwise_conv_beyond_the_caches_is_left_to_the_plain_schedule():
    """Maps larger than the cores' L2 together are streamed from memory whatever the register
    tile: the plain schedule, which streams whole rows, takes the anchor."""
    anchor = _anchor(relax.op.nn.conv2d, (1, 112, 112, 96), (3, 3, 1, 96), strides=2, padding=1,
                     groups=96, data_layout="NHWC", kernel_layout="HWIO")
    assert plan_register_tile(anchor, AVX2) is None


def test_register_budget_and_core_count_hold_for_every_plan():
    anchors = [_matmul((128, 768), (768, 768)), _matmul((12, 128, 64), (12, 64, 128)),
               _conv((1, 256, 14, 14), (512, 256, 1, 1)), _conv((1, 512, 7, 7), (512, 512, 3, 3), padding=1)]
    for anchor in anchors:
        plan = plan_register_tile(anchor, AVX2)
        headroom = WINDOW_HEADROOM if has_window(anchor) else 0
        assert plan.rows * plan.vectors + plan.vectors + 1 + headroom <= AVX2.vector_registers
        assert registers_needed(plan.rows, plan.vectors, headroom) <= AVX2.vector_registers
        tiles = 1
        for pos, size in plan.tile.items():
            assert anchor.extents[pos] % size == 0 and size % plan.micro.get(pos, 1) == 0
            tiles *= anchor.extents[pos] // size
        assert tiles >= AVX2.num_cores


def test_reduction_block_counts_the_cache_lines_of_a_short_nchw_row():
    """A 1x1 conv over a 7 x 7 map (ResNet-50's last stage): each input channel is a 28-byte row
    of its own cache line, so 256 channels take about 22 KiB of L1 (7 KiB of elements) besides
    the 8 KiB weight panel; the block is 128 channels (16 KiB panel budget)."""
    anchor = _conv((1, 2048, 7, 7), (512, 2048, 1, 1))
    plan = plan_register_tile(anchor, AVX2)
    assert anchor.loop_iters[plan.vector].var.name == "v_ff" and plan.transposed
    assert plan.reduce_block == {4: 128, 5: 1, 6: 1}


def test_line_bytes_of_aligned_and_unaligned_runs():
    """Rows of 8 floats at 32-byte-aligned starts fill one line each; rows of 7 floats (28 bytes
    at 4-byte alignment) span 88 bytes of lines on average; a contiguous panel is its bytes."""
    conv = _conv((1, 256, 56, 56), (64, 256, 1, 1))
    x, _, _ = conv.accesses
    # loop positions: n, ff, yy, xx, rc, ry, rx; one row of 8 columns for 16 channels
    assert x.line_bytes([1, 1, 1, 8, 16, 1, 1]) == 16 * 64
    small = _conv((1, 2048, 7, 7), (512, 2048, 1, 1))
    x, w, _ = small.accesses
    assert x.line_bytes([1, 1, 1, 7, 16, 1, 1]) == 16 * 88
    assert x.bytes([1, 1, 1, 7, 16, 1, 1]) == 16 * 28
    assert w.line_bytes([1, 8, 1, 1, 2048, 1, 1]) == 8 * 2048 * 4  # whole rows, line-aligned


def test_single_vector_micro_kernel_keeps_a_register_per_broadcast():
    """With one streamed vector, LLVM loads every row's broadcast ahead of the FMAs: 8 rows x 1
    vector needs 17 registers (it spilled an accumulator every other step), 7 x 1 needs 15;
    with several vectors one broadcast register serves each row in turn."""
    assert registers_needed(8, 1, 0) == 17 and registers_needed(7, 1, WINDOW_HEADROOM) == 15
    assert registers_needed(4, 3, 0) == 16 and registers_needed(2, 4, WINDOW_HEADROOM) == 15


def test_nchw_1x1_conv_over_56_columns_vectorises_output_channels():
    """ResNet-50's 256 -> 64 1x1 conv at 56 x 56: along the columns, 8 rows x 1 vector do not fit
    the registers and a whole 56-column row per step brings 4 input lines from L2 for 7 FMAs;
    4 columns x 2 vectors of output channels stream the packed weight panel from L1 (reused
    over the columns) and one input line per step."""
    anchor = _conv((1, 256, 56, 56), (64, 256, 1, 1))
    plan = plan_register_tile(anchor, AVX2, prepacked=[anchor.operand_reads[1].source])
    assert (anchor.loop_iters[plan.vector].var.name, plan.vectors) == ("v_ff", 2)
    assert (anchor.loop_iters[plan.register].var.name, plan.rows) == ("v_xx", 4)
    assert plan.transposed


AVX512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=2 * 1024 * 1024, vector_registers=32,
                 l1_bytes=48 * 1024, l2_bytes=2 * 1024 * 1024)


def test_stride_of_a_walk_in_bytes():
    """``W[F, C] . X[C, H*W]``: a step of the reduction moves X by a row of 784 floats and W by
    one float; a step of the columns moves X by one float and leaves W where it is."""
    anchor = _matmul((128, 512), (1, 512, 784))
    w, x = anchor.accesses[:2]
    reduce = anchor.reduce_positions[-1]
    columns = anchor.spatial_positions[-1]
    assert x.stride_bytes(reduce) == 784 * 4 and w.stride_bytes(reduce) == 4
    assert x.stride_bytes(columns) == 4 and w.stride_bytes(columns) == 0


def test_a_micro_kernel_reading_a_far_line_per_step_loses_to_a_packed_panel():
    """ResNet-50's 512 -> 128 1x1 conv as a matmul over 784 columns on AVX-512: along the columns
    (49 vectors: one or seven per row) each step reads a line of X a 3136-byte row away from the
    last, which no prefetcher runs ahead of (8 x 1 vectors: 120-165 GFLOP/s on two Emerald Rapids
    cores); along the output channels the compile-time packed weight panel streams from L1 and
    each step broadcasts 14 columns of one line of X (245-253 GFLOP/s)."""
    anchor = _matmul((128, 512), (1, 512, 784))
    plan = plan_register_tile(anchor, AVX512, prepacked=[anchor.operand_reads[0].source])
    assert anchor.loop_iters[plan.vector].var.name == "v_i1" and plan.transposed
    assert (plan.vectors, plan.rows) == (2, 14)


@T.prim_func(s_tir=True)
def _reshaped_matmul(x: T.Buffer((8, 197, 192), "float32"), w: T.Buffer((192, 192), "float32"),
                     y: T.Buffer((1576, 192), "float32")):
    """A matmul reading its input through the reshape ``FuseTIR`` inlined in front of it: row
    ``i`` of ``[1576, 192]`` is ``x[i // 197, i % 197]``."""
    T.func_attr({"tirx.noalias": True})
    for i, j, k in T.grid(1576, 192, 192):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                y[vi, vj] = T.float32(0)
            y[vi, vj] = y[vi, vj] + x[vi // 197, vi % 197, vk] * w[vk, vj]


def test_a_reshaped_input_counts_the_rows_it_reads():
    """``i // 197`` and ``i % 197`` are not affine one by one, but their flattened index is ``i``:
    the input is one dimension of 1576 rows, so a micro-kernel's panel is its rows, not the whole
    tensor, and the reduction is blocked inside the micro-kernels (counted whole, the panel
    overflowed L1 and the 192-step reduction ran outside them, accumulators in memory)."""
    infos = [info for _, info in analyze_blocks(s_tir.Schedule(_reshaped_matmul.with_attr("global_symbol", "main")))]
    anchor = infos[pick_anchor(infos)]
    x_access = anchor.accesses[0]
    assert len(x_access.dims) == 2 and x_access.dims[0][0] == 1576
    rows = [4 if anchor.loop_iters[p].var.name == "vi" else 1 for p in range(len(anchor.extents))]
    assert x_access.elements(rows) == 4
    plan = plan_register_tile(anchor, AVX2)
    assert max(plan.reduce_block.values()) > 1


@T.prim_func(s_tir=True)
def _image_as_matrix_matmul(w: T.Buffer((128, 128), "float32"), x: T.Buffer((1, 128, 28, 28), "float32"),
                            y: T.Buffer((1, 128, 784), "float32")):
    """A 1x1 conv as a matmul (``PointwiseConvAsMatmul``) with the image-to-matrix reshape fused in
    front of it: column ``j`` of ``[128, 784]`` is ``x[0, k, j // 28, j % 28]``."""
    T.func_attr({"tirx.noalias": True})
    for b, i, j, k in T.grid(1, 128, 784, 128):
        with T.sblock("matmul"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                y[vb, vi, vj] = T.float32(0)
            y[vb, vi, vj] = y[vb, vi, vj] + w[vi, vk] * x[vb, vk, vj // 28, vj % 28]


def test_a_reshaped_input_streams_along_its_flattened_columns():
    """``j // 28`` and ``j % 28`` index the input's last two dimensions, whose flattened index is
    ``j``: the input is contiguous along ``j``, so ``j`` is vectorised as in the matmul without
    the reshape (read as strided, the output channels were vectorised with a transposed
    accumulator, and the kernel ran 1.37x slower than the matmul behind a view of its input)."""
    infos = [info for _, info in analyze_blocks(s_tir.Schedule(_image_as_matrix_matmul.with_attr("global_symbol", "main")))]
    anchor = infos[pick_anchor(infos)]
    plan = plan_register_tile(anchor, AVX2, prepacked=[anchor.operand_reads[0].source])
    assert anchor.loop_iters[plan.vector].var.name == "vj"
    assert not plan.transposed and plan.packed == ()


AVX512 = CPUSpec("avx512", num_cores=2, vector_bytes=64, fast_memory_bytes=1 << 20, vector_registers=32,
                 l1_bytes=32 * 1024, l2_bytes=1 << 20)


def test_accumulator_reloads_decide_between_equally_fast_steps():
    """ResNet-50's 3x3 conv over 256 channels at 14 x 14 on AVX-512: 8 x 2 and 2 x 7 vectors fill
    the FMA pipes alike per step, but 8 vectors' weight panel leaves one channel (9 steps) per
    reduction block and 2 vectors' eight (72 steps), so 8 x 2 loads and stores its accumulators
    eight times as often (measured 189 against 219 GFLOP/s)."""
    anchor = _conv((1, 256, 14, 14), (256, 256, 3, 3), padding=1)
    plan = plan_register_tile(anchor, AVX512, prepacked=[anchor.operand_reads[1].source])
    assert (anchor.loop_iters[plan.vector].var.name, plan.vectors) == ("v_ff", 2)
    assert (anchor.loop_iters[plan.register].var.name, plan.rows) == ("v_xx", 7)
    assert plan.reduce_block == {4: 8, 5: 3, 6: 3}

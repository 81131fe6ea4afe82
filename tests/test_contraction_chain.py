"""ContractionChain (GraphTurbo section 4.1 loop fusion along a chain, APOLLO section 4.2): two
chained contractions in one loop nest, the intermediate at block size.

Kernels are built from Relax (``tvm_fusion_ext.testing.chains``: a transformer MLP and a depthwise
-> pointwise inverted-residual tail, each as one group) and scheduled for an AVX2 spec with two
cores and 512 KB of L2, so block sizes do not depend on the machine running the tests.
"""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.s_tir.stmt import SBlock

from tvm_fusion_ext.cost import KernelCostModel
from tvm_fusion_ext.cost.calibration import load_or_calibrate
from tvm_fusion_ext.cost.features import kernel_features
from tvm_fusion_ext.cost.model import scheduled
from tvm_fusion_ext.driver.build import max_abs_error, random_inputs
from tvm_fusion_ext.hardware import CPUSpec
from tvm_fusion_ext.pipelines import schedule_passes
from tvm_fusion_ext.testing.chains import (
    chain_kernel,
    chain_pipeline,
    dw_pw_module,
    fusion_passes,
    mlp_module,
    pw_dw_module,
)
from tvm_fusion_ext.tir_passes import ContractionChain, DefaultSchedule
from tvm_fusion_ext.tir_passes.analysis import block_names, lowered_allocations
from tvm_fusion_ext.tir_passes.default_schedule import schedule_remarks
from tvm_fusion_ext.tir_passes.loop_fusion import LAYOUT_REWRITE_PREPROC

TARGET = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})   # 8 float32 lanes
SPEC = CPUSpec(name="avx2", num_cores=2, vector_bytes=32, fast_memory_bytes=512 * 1024)


def _chain_schedule(mod):
    rule = ContractionChain(SPEC)
    sch = rule.apply(chain_kernel(mod, TARGET), TARGET, False)
    assert sch is not None, rule.reason
    return sch.mod["main"]


def _packed_weights(func) -> set[str]:
    """Names of the buffers written by layout-rewrite blocks (weights packed at compile time)."""
    names = set()
    tvm_ffi.structural_walk(func.body, [(SBlock, lambda block: names.update(
        w.source.name for w in block.writes) if LAYOUT_REWRITE_PREPROC in block.annotations else None)])
    return names


def test_mlp_intermediate_is_a_block_of_token_rows():
    """64 tokens x 32 -> 128 -> 32: the [64, 128] GELU output exists only as a block of rows."""
    func = _chain_schedule(mlp_module(64, 32))
    packed_weights = _packed_weights(func)   # computed once, at compile time, out of the kernel
    allocations = {name: a for name, a in lowered_allocations(func).items() if name not in packed_weights}
    assert allocations and all(scope == "local" for _, scope in allocations.values()), allocations
    assert all(np.prod(shape) < 64 * 128 for shape, _ in allocations.values()), allocations
    widest = [shape for shape, _ in allocations.values() if 128 in shape]
    assert widest and all(shape[0] < 64 for shape in widest), allocations   # [rows of a block, 128]
    # one parallel block loop around both contractions
    script = func.script()
    assert script.count("T.parallel") == 1 and script.count("T.vectorized") >= 4


def test_dw_pw_intermediate_is_a_block_of_image_rows():
    """3x3 depthwise (32 channels, 16 x 16) -> 1x1 to 24: the activated depthwise output is a
    tile of a few image rows, and so is the padded input."""
    func = _chain_schedule(dw_pw_module(32, 16, 24))
    allocations = lowered_allocations(func)
    assert all(scope == "local" for _, scope in allocations.values()), allocations
    full = 32 * 16 * 16
    assert all(np.prod(shape) < full for shape, _ in allocations.values()), allocations
    assert any(shape[1] == 32 and shape[2] < 16 for shape, _ in allocations.values()), allocations


def test_nhwc_dw_pw_intermediate_is_a_block_of_image_rows():
    """The same chain in NHWC (as ``ChannelsLast`` leaves MobileNet): the depthwise output is a
    tile of a few image rows of all 32 channels."""
    func = _chain_schedule(dw_pw_module(32, 16, 24, layout="NHWC"))
    packed_weights = _packed_weights(func)   # the depthwise weight in micro-kernel panels
    allocations = {name: a for name, a in lowered_allocations(func).items() if name not in packed_weights}
    assert all(scope == "local" for _, scope in allocations.values()), allocations
    assert all(np.prod(shape) < 32 * 16 * 16 for shape, _ in allocations.values()), allocations
    assert any(len(shape) == 4 and shape[1] < 16 and shape[3] == 32 for shape, _ in allocations.values()), allocations


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("stride", [1, 2])
def test_pw_dw_expansion_is_a_block_of_image_rows_with_its_halo(stride, layout):
    """1x1 expansion (16 -> 64 channels, 28 x 28) -> padded 3x3 depthwise conv: the expanded map
    exists only as a block of it - in NHWC the rows one block of depthwise output rows reads (its
    halo included); in NCHW a block of channels, the anchor's outermost axis - and the expansion is
    register-tiled inside the block."""
    func = _chain_schedule(pw_dw_module(16, 28, 64, stride=stride, layout=layout))
    packed_weights = _packed_weights(func)
    allocations = {name: a for name, a in lowered_allocations(func).items() if name not in packed_weights}
    assert allocations and all(scope == "local" for _, scope in allocations.values()), allocations
    assert all(np.prod(shape) < 64 * 28 * 28 for shape, _ in allocations.values()), allocations
    if layout == "NHWC":
        expanded = [shape for shape, _ in allocations.values() if shape[-1] == 64]
        assert expanded and all(shape[1] < 28 for shape in expanded), allocations
    tiled = [nest for nest in kernel_features(func, SPEC) if any(kind == "tiled" for kind, _ in nest.ops)]
    assert tiled, "no register-tiled contraction in the chain kernel"


def test_declines_blocks_whose_halos_recompute_most_of_the_expansion():
    """EfficientNet-B0's 1x1 expansion (24 -> 144 channels, 56 x 56) -> 5x5 depthwise conv at stride
    2: the blocks that fit the fast memory read 2 * rows + 3 expansion rows for 2 * rows input
    rows, and recompute more than MAX_HALO_RECOMPUTE times the expansion; the same chain with a 3x3
    window is blocked."""
    rule = ContractionChain(SPEC)
    func = chain_kernel(pw_dw_module(24, 56, 144, stride=2, layout="NHWC", window=5), TARGET)
    assert rule.apply(func, TARGET, False) is None
    assert "recompute" in rule.reason and "halos" in rule.reason, rule.reason
    assert _chain_schedule(pw_dw_module(24, 56, 144, stride=2, layout="NHWC")) is not None


def test_a_batch_whose_image_does_not_fit_is_blocked_by_rows_of_each_image():
    """Four images of 56 x 56 x 48 expanded channels: one image's map (602 KB) is beyond the
    512 KB fast memory, so the batch runs outside the block loop and each block is some rows of
    one image; the images and the row blocks share one parallel loop. (With 144 channels the
    blocks that fit are 2 rows, whose halos would recompute the expansion twice: declined.)"""
    func = _chain_schedule(pw_dw_module(24, 56, 48, layout="NHWC", batch=4))
    packed_weights = _packed_weights(func)
    allocations = {name: a for name, a in lowered_allocations(func).items() if name not in packed_weights}
    assert allocations and all(scope == "local" for _, scope in allocations.values()), allocations
    expanded = [shape for shape, _ in allocations.values() if shape[-1] == 48]
    assert expanded and all(shape[0] == 1 and shape[1] < 56 for shape in expanded), allocations
    assert func.script().count("T.parallel") == 1


@pytest.mark.parametrize("mod", [mlp_module(64, 32), dw_pw_module(32, 16, 24), dw_pw_module(32, 7, 32),
                                 dw_pw_module(32, 16, 24, layout="NHWC"), dw_pw_module(32, 7, 32, layout="NHWC"),
                                 pw_dw_module(16, 28, 64), pw_dw_module(16, 28, 64, stride=2),
                                 pw_dw_module(16, 28, 64, layout="NHWC"),
                                 pw_dw_module(16, 28, 64, stride=2, layout="NHWC"),
                                 pw_dw_module(8, 15, 48, stride=2, layout="NHWC"),
                                 pw_dw_module(8, 56, 96, stride=2, layout="NHWC", batch=2)],
                         ids=["mlp", "dw_pw", "dw_pw_7x7_residual", "dw_pw_nhwc", "dw_pw_7x7_residual_nhwc",
                              "pw_dw", "pw_dw_stride2", "pw_dw_nhwc", "pw_dw_stride2_nhwc", "pw_dw_odd_nhwc",
                              "pw_dw_batch2_nhwc"])
def test_chain_kernels_compute_what_the_unfused_module_computes(mod):
    stats = DefaultSchedule(TARGET, SPEC)
    stats(tvm.IRModule({"main": chain_kernel(mod, TARGET)}))
    assert stats.stats["ContractionChain"] == 1, dict(stats.stats)
    inputs = random_inputs(mod["main"], seed=3)
    assert all(np.abs(x).max() > 0 for x in inputs)
    expected = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](
        *[tvm.runtime.tensor(x) for x in inputs]).numpy()
    ex = tvm.compile(mod, TARGET, relax_pipeline=chain_pipeline(TARGET, fused=True))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()
    assert np.abs(expected).max() > 0
    assert max_abs_error(got, expected) < 1e-4 * max(1.0, float(np.abs(expected).max()))


def test_chain_weights_are_packed_at_compile_time():
    """The 1x1 conv over 7 x 7 pixels vectorises its output channels and packs its weight: the
    packing runs once at compile time, never in the kernel."""
    mod = dw_pw_module(32, 7, 32)
    with TARGET:
        out = tvm.transform.Sequential([*fusion_passes(True), *schedule_passes(TARGET, "untuned")])(mod)
    kernels = {gv.name_hint: f for gv, f in out.functions_items() if isinstance(f, tirx.PrimFunc)}
    (name,) = kernels
    assert name.endswith("_prepacked") and LAYOUT_REWRITE_PREPROC not in kernels[name].script()


@pytest.fixture(scope="module")
def transposed_chain():
    """matmul -> GELU -> transpose -> matmul: the anchor's rows are the producer's columns."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((32, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            up = bb.emit(relax.op.nn.gelu(relax.op.matmul(x, relax.const(rng.standard_normal((16, 64)).astype("float32")))))
            flipped = bb.emit(relax.op.permute_dims(up))
            out = bb.emit_output(relax.op.matmul(flipped, relax.const(rng.standard_normal((32, 16)).astype("float32"))))
        bb.emit_func_output(out)
    return chain_kernel(bb.get(), TARGET)


def test_declines_an_intermediate_consumed_through_a_transpose(transposed_chain):
    rule = ContractionChain(SPEC)
    assert rule.apply(transposed_chain, TARGET, False) is None
    assert "not element-wise" in rule.reason and "transpose" in rule.reason, rule.reason
    schedule = DefaultSchedule(TARGET, SPEC)
    out = schedule(tvm.IRModule({"main": transposed_chain}))
    assert schedule.stats["AnchorLoopFusion"] == 1 and out["main"].attrs["tirx.is_scheduled"]
    assert schedule.remarks["main"][0].startswith("ContractionChain:")


def test_passes_over_kernels_with_one_contraction_without_a_remark():
    mod = dw_pw_module(32, 16, 24)
    with TARGET:
        parts = tvm.transform.Sequential(fusion_passes(False))(mod)
    for _, func in parts.functions_items():
        if isinstance(func, tirx.PrimFunc):
            rule = ContractionChain(SPEC)
            assert rule.apply(func, TARGET, False) is None and rule.reason is None and not rule.applicable
            assert not any(r.startswith("ContractionChain") for r in schedule_remarks(func, TARGET))
            assert len([b for b in block_names(func) if "conv" in b]) == 1


def test_the_cost_model_reads_a_chain_kernel_as_two_register_tiles():
    """What the profitability check predicts from: both contractions of the chain kernel count as
    register-tiled (none as a scalar reduction chain), its intermediates cost no memory traffic,
    and the kernel is predicted near its two parts, not far above or below."""
    model = KernelCostModel(TARGET, load_or_calibrate())
    mod = dw_pw_module(32, 16, 24)
    with TARGET:
        parts = tvm.transform.Sequential([*fusion_passes(False), relax.transform.AttachAttrLayoutFreeBuffers()])(mod)
    kernel = chain_kernel(mod, TARGET)
    nests = kernel_features(scheduled(kernel, TARGET))
    assert sum(ops for nest in nests for (kind, _), ops in nest.ops.items() if kind == "reduce") == 0
    assert sum(ops for nest in nests for (kind, parallel), ops in nest.ops.items() if kind == "tiled" and parallel) \
        >= 2 * 32 * 16 * 16 * (9 + 24)
    parts_s = sum(model.seconds(f) for _, f in parts.functions_items() if isinstance(f, tirx.PrimFunc))
    assert 0.5 * parts_s < model.seconds(kernel) < 1.05 * parts_s


def test_the_cost_model_reads_a_chain_kernel_as_phases():
    """Every core computes its block's producer rows, then the anchor's tile: the two phases are
    two ``max(compute, memory)`` terms of the prediction, each with its own register tile."""
    kernel = chain_kernel(pw_dw_module(16, 28, 64, layout="NHWC"), TARGET)
    nests = kernel_features(scheduled(kernel, TARGET), SPEC)
    tiled = [nest for nest in nests if any(kind == "tiled" for kind, _ in nest.ops)]
    assert len(tiled) == 2, [nest.ops for nest in nests]

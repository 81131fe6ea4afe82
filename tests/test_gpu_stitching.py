"""APOLLO's stitching on CUDA: parallelism stitching (section 4.3, ``GPUParallelStitch``) makes a
kernel's independent branches one ``__global__`` function, memory stitching (section 4.2,
``SharedRowReduction``) keeps a layer norm's / softmax's row in shared memory so the input is read
from global memory once. CUDA source is generated without a GPU; the numerics tests run only where
``tvm.cuda().exist``."""

import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tir_cases import gpu_launches
from tvm import s_tir, te, tirx, topi
from tvm.s_tir import dlight as dl
from tvm.s_tir.stmt import SBlock

from tvm_fusion_ext.testing import verify
from tvm_fusion_ext.testing.cuda import (
    H100_LIMITS,
    MISSING,
    TARGET,
    build_for_cuda,
    cuda_source,
    kernel_bodies,
    kernels,
    launches,
    lowered,
    zoo_model,
)
from tvm_fusion_ext.tir_passes.gpu_parallel_stitch import GPUParallelStitch
from tvm_fusion_ext.tir_passes.gpu_row_stitch import SharedRowReduction

needs_cuda_build = pytest.mark.skipif(bool(MISSING), reason="needs " + " and ".join(MISSING))
needs_gpu = pytest.mark.skipif(not tvm.cuda().exist, reason="no CUDA GPU on this machine (tvm.cuda().exist is false)")
STITCHED_MODELS = ["multi_head", "multi_tail", "apollo_fig3"]
NORMALISATIONS = [("layernorm_chain", "layer_norm"), ("softmax_chain", "softmax")]


def _stitch(func):
    return GPUParallelStitch()(tvm.IRModule({"main": func.without_attr("global_symbol")}))["main"]


def _assert_stitched_to(func, expected):
    tvm.ir.assert_structural_equal(_stitch(func), expected.without_attr("global_symbol"))


def _build_zoo(name, fusion, cost_check=True):
    pytest.importorskip("torch")
    zoo_model(name)
    return build_for_cuda(name, fusion, cost_check)


def _build_kernel(func):
    target = tvm.target.Target(TARGET)
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target)


# ---- parallelism stitching on hand-built kernels -------------------------------------------------


def test_independent_branches_share_one_grid_and_the_smaller_branch_is_thread_guarded():
    _assert_stitched_to(gpu_launches.independent, gpu_launches.independent_stitched)


def test_a_thread_private_dependence_is_chained_and_its_intermediate_goes_local():
    _assert_stitched_to(gpu_launches.row_sum_then_scale, gpu_launches.row_sum_then_scale_stitched)


@pytest.mark.parametrize("case", ["reversed_dependence", "copy_beside_block_reduction"])
def test_dependent_or_unguardable_branches_are_left_alone(case):
    """A read of what another thread wrote needs a grid-wide barrier, and a barrier may not sit in
    a thread-divergent guard: both kernels come back unchanged."""
    _assert_stitched_to(getattr(gpu_launches, case), getattr(gpu_launches, case))


def test_a_reduction_keeps_its_threads_and_the_copy_beside_it_is_guarded():
    stitched = _stitch(gpu_launches.block_reduction_beside_copy)
    grids = []
    tvm_ffi.structural_walk(stitched.body, [(tirx.For, lambda loop: grids.append(loop.extent.value)
                                            if loop.kind == tirx.ForKind.THREAD_BINDING
                                            and loop.thread_binding.thread_tag == "blockIdx.x" else None)],
                            order="pre")
    assert grids == [5]


@needs_cuda_build
@pytest.mark.parametrize("case", ["independent", "row_sum_then_scale", "block_reduction_beside_copy"])
def test_stitched_hand_built_kernels_are_one_launch_within_the_h100_limits(case):
    stitched = _stitch(getattr(gpu_launches, case))
    source = cuda_source(_build_kernel(stitched))
    assert list(kernel_bodies(source)) == ["main_kernel"]
    (func,) = lowered(tvm.IRModule({"main": stitched})).values()
    assert s_tir.analysis.verify_gpu_code(func, H100_LIMITS)


# ---- parallelism stitching on the zoo's multi-branch models ---------------------------------------


def _branch_guards(func) -> int:
    """Block-range guards directly under a top-level ``blockIdx.x`` loop."""
    body = func.body.block.body
    loops = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    return max(len([s for s in (loop.body.seq if isinstance(loop.body, tirx.SeqStmt) else [loop.body])
                    if isinstance(s, tirx.IfThenElse)]) for loop in loops if isinstance(loop, tirx.For))


@needs_cuda_build
@pytest.mark.parametrize("name", STITCHED_MODELS)
def test_a_parallel_stitched_multi_branch_kernel_is_one_global_function(name):
    """APOLLO's groups as the paper makes them (``cost_check=False``: the CUDA profitability
    check would keep multi_head's serially reduced rows apart at full size), so the test keeps
    showing the mechanism."""
    scheduled, executable = _build_zoo(name, "apollo", cost_check=False)
    bodies = kernel_bodies(cuda_source(executable))
    counts = {kernel: len(launches(bodies, kernel)) for kernel in kernels(scheduled)}
    assert counts and set(counts.values()) == {1}, counts
    if name == "multi_head":
        # dlight leaves its four branches as five nests (the mean's division after its sum): all
        # stitched into one grid of four block ranges
        (func,) = kernels(scheduled).values()
        assert _branch_guards(func) == 4


# ---- memory stitching -------------------------------------------------------------------------------


def _row_inputs(func) -> list[str]:
    """Parameters that the kernel's reduction blocks read."""
    names = []

    def visit(block):
        if any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars):
            names.extend(r.source.name for r in block.reads)

    tvm_ffi.structural_walk(func.body, [(SBlock, visit)], order="pre")
    params = {p.name for p in func.params}
    return sorted({n.removesuffix("_shared") for n in names} & params)


@needs_cuda_build
@pytest.mark.parametrize("fusion", ["stock", "apollo"])
@pytest.mark.parametrize(("name", "op"), NORMALISATIONS)
def test_a_stitched_normalisation_reads_its_input_from_global_memory_once(name, op, fusion):
    scheduled, executable = _build_zoo(name, fusion)
    bodies = kernel_bodies(cuda_source(executable))
    (kernel, func), = [(k, f) for k, f in kernels(scheduled).items() if op in k]
    (body,) = launches(bodies, kernel).values()
    assert "__shared__" in body and "__syncthreads()" in body
    inputs = _row_inputs(func)
    assert inputs, f"{kernel}: no input read by a reduction"
    for param in inputs:
        loads = re.findall(rf"\b{param}_ptr\[", body)
        assert len(loads) == 1, f"{kernel}: {param} loaded at {len(loads)} sites"
        assert f"{param}_shared_ptr[" in body, f"{kernel}: {param} not staged in shared memory"


def _softmax(width):
    x = te.placeholder((8, width), "float32", name="x")
    return te.create_prim_func([x, topi.nn.softmax(x)])


def _shared_buffers(sch) -> list[str]:
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(SBlock, lambda block: found.extend(
        buf.name for buf in block.alloc_buffers if buf.scope() == "shared"))], order="pre")
    return found


@pytest.mark.parametrize(("width", "cached"), [(1024, True), (16384, False), (tirx.Var("n", "int64"), False)])
def test_the_row_is_cached_only_when_it_fits_the_static_shared_memory(width, cached):
    """A 4 KB row goes to shared memory; a 64 KB row exceeds the H100's 48 KB of static shared
    memory per block and a row of unknown length cannot be sized: those two are declined, and
    dlight's ``GeneralReduction`` schedules them as before."""
    func = _softmax(width)
    target = tvm.target.Target(TARGET)
    assert dl.gpu.GeneralReduction().apply(func, target, False) is not None
    sch = SharedRowReduction().apply(func, target, False)
    assert (sch is not None) == cached
    if cached:
        assert "x_shared" in _shared_buffers(sch)


# ---- numerics on a GPU ------------------------------------------------------------------------------


# numpy references of the hand-built kernels: parameter index -> expected value from the inputs
REFERENCES = {
    "independent": lambda x, y, a, b: {2: x * 2.0, 3: -y},
    "row_sum_then_scale": lambda x, out: {1: x.sum(axis=1) / 8.0},
    "block_reduction_beside_copy": lambda x, y, total, b: {2: x.sum(axis=1), 3: y},
}


@needs_gpu
@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_stitched_hand_built_kernels_match_numpy_on_the_gpu(case):
    func = _stitch(getattr(gpu_launches, case))
    rng = np.random.default_rng(0)
    args = [rng.uniform(-2.0, 2.0, [int(d) for d in p.shape]).astype("float32") for p in func.params]
    tensors = [tvm.runtime.tensor(a, tvm.cuda()) for a in args]
    _build_kernel(func)["main"](*tensors)
    for index, expected in REFERENCES[case](*args).items():
        np.testing.assert_allclose(tensors[index].numpy(), expected, rtol=1e-5, atol=1e-5)


@needs_gpu
@pytest.mark.parametrize("name", [*STITCHED_MODELS, "layernorm_chain", "softmax_chain"])
def test_stitched_zoo_kernels_match_pytorch_on_the_gpu(name):
    """APOLLO's groups as the paper makes them (``cost_check=False``), stitched."""
    model = zoo_model(name)
    actual = verify.run(_build_zoo(name, "apollo", cost_check=False)[1], model.numpy_inputs(),
                        device=tvm.cuda())
    error = verify.max_rel_error(actual, model.reference_outputs())
    assert error < 1e-4, f"{name} / apollo on {tvm.cuda().device_name}: relative error {error:.2e}"

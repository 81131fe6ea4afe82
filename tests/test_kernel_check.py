"""``driver.kernel_check``: a strategy's kernels checked one by one against their unscheduled
form, and a wrong kernel caught; a GPU schedule checked on the host with its thread loops serial,
which shows a wrong schedule of dlight's that the CUDA rule chain
(``tir_passes/gpu_rules.py``) declines."""

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

from tvm_fusion_ext import zoo
from tvm_fusion_ext.cost.gpu_model import scheduling_rule
from tvm_fusion_ext.driver.kernel_check import check_kernels, compare_kernel, threads_as_serial_loops
from tvm_fusion_ext.tir_passes.gpu_rules import (
    DeclineWhere,
    cuda_schedule_rules,
    reads_reduction_partially,
    reduces_less_than_a_warp,
)


@T.prim_func(s_tir=True)
def add(a: T.Buffer((8, 16), "float32"), b: T.Buffer((8, 16), "float32"), c: T.Buffer((8, 16), "float32")):
    for i, j in T.grid(8, 16):
        with T.sblock("add"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = a[vi, vj] + b[vi, vj]


@T.prim_func(s_tir=True)
def subtract(a: T.Buffer((8, 16), "float32"), b: T.Buffer((8, 16), "float32"), c: T.Buffer((8, 16), "float32")):
    for i, j in T.grid(8, 16):
        with T.sblock("add"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = a[vi, vj] - b[vi, vj]


def test_every_kernel_of_a_cpu_build_matches_its_unscheduled_form():
    model = zoo.load("apollo_fig3", zoo.SMALL_ARGS["apollo_fig3"])
    checks = check_kernels(model.relax("torch"), "apollo", tvm.target.Target("llvm"))
    assert checks and not [c for c in checks if c.failure]
    assert max(c.rel_error for c in checks) < 1e-5


def test_a_wrong_kernel_is_caught():
    rng = np.random.default_rng(0)
    assert compare_kernel(add, add, "llvm", tvm.cpu(), rng) == 0.0
    assert compare_kernel(subtract, add, "llvm", tvm.cpu(), rng) > 0.1


@T.prim_func(s_tir=True)
def conv_concat_mean(a: T.Buffer((64,), "float32"), w: T.Buffer((32, 64), "float32"),
                     earlier: T.Buffer((96,), "float32"), out: T.Buffer((128,), "float32")):
    """DenseNet's last block as NeoFlow groups it, reduced to vectors: a 1x1 conv of one pixel
    (32 channels), concatenated after 96 earlier channels, ReLU, then the global mean over one
    pixel."""
    conv = T.sblock_alloc_buffer((32,))
    concat = T.sblock_alloc_buffer((128,))
    relu = T.sblock_alloc_buffer((128,))
    for c, k in T.grid(32, 64):
        with T.sblock("conv"):
            vc, vk = T.axis.remap("SR", [c, k])
            with T.init():
                conv[vc] = T.float32(0.0)
            conv[vc] = conv[vc] + a[vk] * w[vc, vk]
    for c in range(128):
        with T.sblock("concat"):
            vc = T.axis.remap("S", [c])
            concat[vc] = T.if_then_else(96 <= vc, conv[vc - 96], earlier[vc])
    for c in range(128):
        with T.sblock("relu"):
            vc = T.axis.remap("S", [c])
            relu[vc] = T.max(concat[vc], T.float32(0.0))
    for c, p in T.grid(128, 1):
        with T.sblock("mean"):
            vc, _vp = T.axis.remap("SR", [c, p])
            with T.init():
                out[vc] = T.float32(0.0)
            out[vc] = out[vc] + relu[vc]


def _cuda_schedule(func, rules):
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with target:
        return dl.ApplyDefaultSchedule(*rules)(mod)["main"]


def _thread_loops(func) -> int:
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="pre")
    return sum(loop.kind == tirx.ForKind.THREAD_BINDING for loop in loops)


def test_a_gpu_schedule_runs_on_the_host_with_its_thread_loops_serial():
    func = _depthwise_bias_clip(64)
    scheduled = _cuda_schedule(func, cuda_schedule_rules())
    assert _thread_loops(scheduled) and not _thread_loops(threads_as_serial_loops(scheduled))
    error = compare_kernel(threads_as_serial_loops(scheduled), func, "llvm", tvm.cpu(), np.random.default_rng(0))
    assert error < 1e-5


def test_dlight_reduction_leaves_a_concatenated_epilogue_partly_unwritten_and_the_chain_declines_it():
    """dlight's Reduction computes the epilogue at the conv's 32 channels only (the 96 earlier
    channels of the concatenation stay unwritten): the host run of its schedule shows it, and the
    backend's chain gives the kernel to a rule that writes every channel."""
    assert reads_reduction_partially(conv_concat_mean) and not reads_reduction_partially(_depthwise_bias_clip(64))
    rng = np.random.default_rng(0)
    unguarded = _cuda_schedule(conv_concat_mean, [dl.gpu.Reduction(), dl.gpu.Fallback()])
    assert compare_kernel(threads_as_serial_loops(unguarded), conv_concat_mean, "llvm", tvm.cpu(), rng) > 0.1
    guarded = DeclineWhere(dl.gpu.Reduction(), reads_reduction_partially)
    assert guarded.apply(conv_concat_mean, tvm.target.Target("cuda"), False) is None
    scheduled = _cuda_schedule(conv_concat_mean, cuda_schedule_rules())
    assert _thread_loops(scheduled)
    assert compare_kernel(threads_as_serial_loops(scheduled), conv_concat_mean, "llvm", tvm.cpu(), rng) < 1e-5


def _depthwise_bias_clip(taps: int):
    """A depthwise conv over ``taps`` taps of 16 channels x 256 pixels, its bias and ReLU6, as
    FuseOps groups MobileNetV2's."""

    @T.prim_func(s_tir=True)
    def func(x: T.Buffer((16, 256 + taps), "float32"), w: T.Buffer((16, taps), "float32"),
             bias: T.Buffer((16,), "float32"), out: T.Buffer((16, 256), "float32")):
        conv = T.sblock_alloc_buffer((16, 256))
        for c, p, t in T.grid(16, 256, taps):
            with T.sblock("conv"):
                vc, vp, vt = T.axis.remap("SSR", [c, p, t])
                with T.init():
                    conv[vc, vp] = T.float32(0.0)
                conv[vc, vp] = conv[vc, vp] + x[vc, vp + vt] * w[vc, vt]
        for c, p in T.grid(16, 256):
            with T.sblock("bias_clip"):
                vc, vp = T.axis.remap("SS", [c, p])
                out[vc, vp] = T.min(T.max(conv[vc, vp] + bias[vc], T.float32(0.0)), T.float32(6.0))

    return func


def test_a_reduction_shorter_than_a_warp_gets_a_thread_per_output():
    """Nine taps per output leave a cross-thread reduction's block idle: the chain leaves the
    kernel to ``Fallback``; 64 taps go to a reduction rule."""
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    short, long = _depthwise_bias_clip(9), _depthwise_bias_clip(64)
    assert reduces_less_than_a_warp(short) and not reduces_less_than_a_warp(long)
    with target:
        assert isinstance(scheduling_rule(short, target)[0], dl.gpu.Fallback)
        assert not isinstance(scheduling_rule(long, target)[0], dl.gpu.Fallback)
    scheduled = _cuda_schedule(short, cuda_schedule_rules())
    error = compare_kernel(threads_as_serial_loops(scheduled), short, "llvm", tvm.cpu(), np.random.default_rng(0))
    assert error < 1e-5


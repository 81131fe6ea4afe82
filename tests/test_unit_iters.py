"""``DropUnitIters`` (``tvm_fusion_ext/tir_passes/unit_iters.py``): constant unit bindings and
unused unit loops go, so dlight's GPU rules accept a simplified kernel; anything else stays."""

import tvm
from tvm.s_tir import dlight as dl
from tvm.script import ir as I
from tvm.script import tirx as T

from tvm_fusion_ext.tir_passes import DropUnitIters


@I.ir_module
class Simplified:
    @T.prim_func(s_tir=True)
    def add(a: T.Buffer((1, 4, 8), "float32"), b: T.Buffer((1, 4, 8), "float32")):
        for ax0, ax1, ax2 in T.grid(1, 4, 8):
            with T.sblock("add"):
                v_ax0 = T.axis.spatial(1, 0)  # noqa: F841  (unread: what the pass removes)
                v_ax1, v_ax2 = T.axis.remap("SS", [ax1, ax2])
                b[0, v_ax1, v_ax2] = a[0, v_ax1, v_ax2] + T.float32(1)


@I.ir_module
class Expected:
    @T.prim_func(s_tir=True)
    def add(a: T.Buffer((1, 4, 8), "float32"), b: T.Buffer((1, 4, 8), "float32")):
        for ax1, ax2 in T.grid(4, 8):
            with T.sblock("add"):
                v_ax1, v_ax2 = T.axis.remap("SS", [ax1, ax2])
                b[0, v_ax1, v_ax2] = a[0, v_ax1, v_ax2] + T.float32(1)


@I.ir_module
class UsedUnitIter:
    @T.prim_func(s_tir=True)
    def add(a: T.Buffer((1, 4), "float32"), b: T.Buffer((1, 4), "float32")):
        for ax0, ax1 in T.grid(1, 4):
            with T.sblock("add"):
                v_ax0 = T.axis.spatial(1, 0)
                v_ax1 = T.axis.spatial(4, ax1)
                b[v_ax0, v_ax1] = a[v_ax0, v_ax1]


def test_constant_unit_bindings_and_their_loops_go():
    tvm.ir.assert_structural_equal(DropUnitIters()(Simplified), Expected)


def test_dlight_schedules_the_kernel_only_afterwards():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    assert dl.gpu.Fallback().apply(Simplified["add"], target, False) is None
    assert dl.gpu.Fallback().apply(DropUnitIters()(Simplified)["add"], target, False) is not None


def test_an_iterator_the_block_reads_stays():
    """Only the unused unit loop goes; ``v_ax0`` indexes the buffers, so the block keeps it."""
    block = DropUnitIters()(UsedUnitIter)["add"].body.block.body.body.block
    assert [iv.var.name for iv in block.iter_vars] == ["v_ax0", "v_ax1"]


def test_scheduled_kernels_are_left_alone():
    scheduled = Simplified.with_attr("unused", 1)
    scheduled["add"] = Simplified["add"].with_attr("tirx.is_scheduled", True)
    assert DropUnitIters()(scheduled)["add"].same_as(scheduled["add"])

"""PlainSchedule: the per-block fallback (parallel outer loops, vectorised inner loop)."""

import pytest
import tvm
from tir_cases import fused, plain_expected, reductions
from tvm import s_tir
from tvm.script import tirx as T

from tvm_fusion_ext.hardware import HardwareSpec
from tvm_fusion_ext.tir_passes import PlainSchedule

SPEC = HardwareSpec("fake", num_cores=2, vector_bytes=16, fast_memory_bytes=2048)


@pytest.mark.parametrize("before, expected", [
    (reductions.elementwise, plain_expected.elementwise),
    (fused.sum_divide, plain_expected.sum_divide),
])
def test_plain_schedule(before, expected):
    sch = PlainSchedule(SPEC).apply(before, tvm.target.Target("llvm"), False)
    tvm.ir.assert_structural_equal(sch.mod["main"].without_attr("global_symbol"),
                                   expected.without_attr("global_symbol"))


def test_single_core_spec_adds_no_parallel_loop():
    one_core = HardwareSpec("one", num_cores=1, vector_bytes=16, fast_memory_bytes=2048)
    sch = PlainSchedule(one_core).apply(reductions.elementwise, tvm.target.Target("llvm"), False)
    assert "T.parallel" not in sch.mod.script() and "T.vectorized" in sch.mod.script()


def test_declines_nested_blocks():
    sch = s_tir.Schedule(reductions.elementwise)
    sch.blockize(sch.get_loops(sch.get_sblock("b"))[0])
    assert PlainSchedule(SPEC).apply(sch.mod["main"], tvm.target.Target("llvm"), False) is None


@T.prim_func(private=True, s_tir=True)
def scalar_then_map(a: T.Buffer((16,), "float32"), s: T.Buffer((), "float32"),
                    b: T.Buffer((16,), "float32")):
    half = T.sblock_alloc_buffer(())
    with T.sblock("half"):
        vi = T.axis.spatial(1, 0)
        half[()] = s[()] * T.float32(0.5)
    for i in range(16):
        with T.sblock("b"):
            vi = T.axis.spatial(16, i)
            b[vi] = a[vi] + half[()]


@T.prim_func(private=True, s_tir=True)
def scalar_then_map_expected(a: T.Buffer((16,), "float32"), s: T.Buffer((), "float32"),
                             b: T.Buffer((16,), "float32")):
    half = T.sblock_alloc_buffer(())
    with T.sblock("half"):
        vi = T.axis.spatial(1, 0)
        half[()] = s[()] * T.float32(0.5)
    for i_0 in T.parallel(2):
        for i_1 in T.vectorized(8):
            with T.sblock("b"):
                vi = T.axis.spatial(16, i_0 * 8 + i_1)
                b[vi] = a[vi] + half[()]


def test_blocks_without_loops_do_not_stop_the_others():
    """Regression (found by fuzzing): a loop-less block (layer norm's 0-d mean) made the plain
    schedule decline the whole kernel, whose scalar loops then met an LLVM -O3 vectoriser bug."""
    sch = PlainSchedule(SPEC).apply(scalar_then_map, tvm.target.Target("llvm"), False)
    tvm.ir.assert_structural_equal(sch.mod["main"], scalar_then_map_expected)

"""PlainSchedule: the per-block fallback (parallel outer loops, vectorised inner loop)."""

import pytest
import tvm
from tir_cases import fused, plain_expected, reductions
from tvm import s_tir

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

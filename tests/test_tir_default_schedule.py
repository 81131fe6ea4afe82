"""DefaultSchedule: dlight-style rule chain, fallback, is_scheduled, registration, end to end."""

from math import erf

import numpy as np
import pytest
import tvm
from tir_cases import fused, reductions
from tvm import relax, s_tir
from tvm.s_tir import dlight as dl
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.driver.build import build_with_phases
from tvm_fusion_ext.hardware import HardwareSpec
from tvm_fusion_ext.tir_passes import DefaultSchedule, PlainSchedule, default_schedule_pass
from tvm_fusion_ext.tir_passes.default_schedule import schedule_remarks

SPEC = HardwareSpec("fake", num_cores=2, vector_bytes=16, fast_memory_bytes=2048)


def _module(**funcs):
    return tvm.IRModule({name: f.without_attr("global_symbol") for name, f in funcs.items()})


def test_each_function_gets_the_first_applicable_rule():
    blocked = s_tir.Schedule(reductions.elementwise)
    blocked.blockize(blocked.get_loops(blocked.get_sblock("b"))[0])
    mod = _module(softmax=fused.softmax, scale=reductions.elementwise, nested=blocked.mod["main"])
    schedule = DefaultSchedule("llvm", SPEC)
    out = schedule(mod)
    assert dict(schedule.stats) == {"AnchorLoopFusion": 1, "PlainSchedule": 1, "unscheduled": 1}
    assert out["softmax"].attrs["tirx.is_scheduled"] and out["scale"].attrs["tirx.is_scheduled"]
    tvm.ir.assert_structural_equal(out["nested"], mod["nested"])
    # why each rule declined the functions it did not schedule, by function
    assert "softmax" not in schedule.remarks
    assert [r.split(":")[0] for r in schedule.remarks["nested"]] == ["AnchorLoopFusion", "PlainSchedule"]
    assert "nested" in schedule.remarks["nested"][0]


def test_remarks_name_a_decline_and_nothing_for_a_chain_scheduled_whole():
    """What the profitability check reads: the concat's decline; a two-matmul chain gets no remark,
    as ContractionChain gives both contractions a register tile (AnchorLoopFusion alone notes the
    second one as a plain loop nest: test_tir_loop_fusion.py)."""
    remarks = schedule_remarks(fused.conv2d_concat, tvm.target.Target("llvm"))
    assert remarks and remarks[0].startswith("AnchorLoopFusion: a block declares other regions")
    two = fused.two_matmuls.with_attr("global_symbol", "main")
    assert schedule_remarks(two, tvm.target.Target("llvm")) == []


def test_already_scheduled_functions_are_left_alone():
    mod = _module(softmax=fused.softmax.with_attr("tirx.is_scheduled", True))
    schedule = DefaultSchedule("llvm", SPEC)
    tvm.ir.assert_structural_equal(schedule(mod), mod)
    assert not schedule.stats


@dl.ScheduleRule.from_callable("Broken")
def _broken_rule(func, target, tunable):
    raise RuntimeError("a rule bug must not fail the compile")


def test_a_failing_rule_falls_through_to_the_next():
    schedule = DefaultSchedule("llvm", SPEC, rules=[_broken_rule, PlainSchedule(SPEC)])
    out = schedule(_module(scale=reductions.elementwise))
    assert dict(schedule.stats) == {"PlainSchedule": 1}
    assert "T.parallel" in out.script()


def test_usable_in_sequential_and_registered_by_name():
    assert default_schedule_pass(tvm.target.Target("llvm")).info.name == "tvm_fusion_ext.DefaultSchedule"
    by_name = tvm.get_global_func("tvm_fusion_ext.DefaultSchedule")("llvm")
    mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), by_name])(Model)
    scheduled = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert scheduled and all(f.attrs["tirx.is_scheduled"] for f in scheduled)


@I.ir_module
class Model:
    @R.function
    def main(x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((8, 4, 3, 3), "float32"),
             b: R.Tensor((1, 8, 1, 1), "float32")):
        with R.dataflow():
            conv = R.nn.relu(R.add(R.nn.conv2d(x, w, padding=1), b))
            flat = R.reshape(conv, (8, 64))
            soft = R.nn.softmax(flat, axis=-1)
            R.output(soft)
        return soft


def test_stock_pipeline_compiles_and_matches_numpy():
    rng = np.random.default_rng(0)
    x, w, b = (rng.uniform(-1, 1, s).astype("float32") for s in ((1, 4, 8, 8), (8, 4, 3, 3), (1, 8, 1, 1)))
    ex = tvm.compile(Model, "llvm", relax_pipeline="tvm_fusion_ext.stock")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, (x, w, b))).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    conv = np.maximum(np.einsum("nchwij,fcij->nfhw", windows, w) + b, 0).reshape(8, 64)
    ref = np.exp(conv - conv.max(-1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_structurally_equal_functions_are_scheduled_once(monkeypatch):
    """Repeated layers: the default rules run once per structure, every copy gets the schedule."""
    from tvm_fusion_ext.tir_passes import AnchorLoopFusion

    calls = []
    original = AnchorLoopFusion.apply
    monkeypatch.setattr(AnchorLoopFusion, "apply",
                        lambda self, func, target, tunable: calls.append(1) or original(self, func, target, tunable))
    spec = HardwareSpec("memo", num_cores=3, vector_bytes=16, fast_memory_bytes=4096)  # no earlier entry
    copy = fused.softmax.with_attr("copy", 1).without_attr("copy")
    assert not copy.same_as(fused.softmax)
    out = DefaultSchedule("llvm", spec)(_module(first=fused.softmax, second=copy))
    assert len(calls) == 1
    assert out["second"].attrs["tirx.is_scheduled"]
    tvm.ir.assert_structural_equal(out["first"], out["second"])
    alone = DefaultSchedule("llvm", spec, rules=[AnchorLoopFusion(spec)])(_module(first=copy))
    tvm.ir.assert_structural_equal(alone["first"], out["second"])


def test_unchecked_primitives_restore_the_type_checks_after_the_last_scope():
    """Inside the scope the primitives are the functions the type checker wraps (a wrong
    argument then fails in C++ rather than in Python), nested scopes keep them so, and leaving
    the outermost one, also by an exception, restores the checked primitives."""
    from tvm import s_tir

    from tvm_fusion_ext.tir_passes.unchecked import unchecked_primitives

    checked = s_tir.Schedule.split
    with pytest.raises(RuntimeError), unchecked_primitives():
        assert s_tir.Schedule.split is checked.__wrapped__
        with unchecked_primitives():
            pass
        assert s_tir.Schedule.split is checked.__wrapped__
        raise RuntimeError
    assert s_tir.Schedule.split is checked
    with pytest.raises(TypeError, match="split"):
        s_tir.Schedule(tvm.IRModule()).split("not a loop", [2])


@I.ir_module
class ReshapeGeluReshape:
    @R.function
    def main(x: R.Tensor((10, 32), "float32")) -> R.Tensor((10, 32), "float32"):
        with R.dataflow():
            y = R.reshape(x, (2, 5, 32))
            z = R.nn.gelu(y)
            out = R.reshape(z, (10, 32))
            R.output(out)
        return out


def test_inlined_reshapes_leave_no_div_mod_index_after_scheduling():
    """The schedule inlines both reshapes into the GELU and leaves ``i // 5 * 5 + i % 5`` as the
    row index, which LLVM does not see through (a GEMM with such an epilogue kept its accumulators
    in memory); the CPU pipeline simplifies every kernel after scheduling."""
    executable, _, scheduled = build_with_phases(ReshapeGeluReshape, "stock", tvm.target.Target("llvm"))
    (kernel,) = [f for _, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "% T.int64(5)" not in kernel.script()
    x = np.random.default_rng(0).uniform(-2, 2, (10, 32)).astype("float32")
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)

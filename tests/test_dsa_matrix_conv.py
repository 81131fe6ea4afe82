"""Convolutions on the DSA's matrix unit (tvm_fusion_ext/target_dsa/intrinsics.py): which blocks
qualify, the numbers a compiled kernel gives on the host, and what an instruction costs."""

import pytest
import tvm
from dsa_cases.matrix_unit import conv_relu, shortcut_conv, unit_busy_matching_llvm
from tvm import relax, tirx

import tvm_fusion_ext  # noqa: F401
from tvm_fusion_ext.target_dsa import schedule
from tvm_fusion_ext.target_dsa.intrinsics import conv_columns, conv_operands
from tvm_fusion_ext.target_dsa.simulator import kernel_cycles, simulate
from tvm_fusion_ext.target_dsa.spec import PRESETS
from tvm_fusion_ext.tir_passes.analysis import sblocks

STCP920 = PRESETS["stcp920"]


def _conv_block(mod: tvm.IRModule):
    legalized = relax.transform.LegalizeOps()(mod)
    func = next(f for _, f in legalized.functions_items() if isinstance(f, tirx.PrimFunc))
    return next(b for b in sblocks(func) if b.name_hint.startswith("conv2d"))


def test_strided_convolutions_qualify_and_dilated_ones_do_not():
    conv = conv_operands(_conv_block(conv_relu((2, 32, 14, 14), 48, 3)))
    assert conv is not None and conv.swapped  # TOPI multiplies the input by the weight
    assert (conv.data, conv.weight, conv.width, conv.stride) == ("pad_temp", "w", 14, 1)
    assert len({conv.rows, conv.columns, conv.reduction, *conv.taps}) == 5
    strided = conv_operands(_conv_block(conv_relu((2, 32, 14, 14), 48, 3, stride=2)))
    assert strided is not None and (strided.width, strided.stride) == (7, 2)
    assert conv_operands(_conv_block(conv_relu((2, 32, 14, 14), 48, 3, dilation=2))) is None
    # The columns: the largest divisor of the row width the 16-wide unit holds, while the unit
    # over that many columns still outruns the 64-wide VME (256 * n / 16 > 64: n > 4).
    assert [conv_columns(w, STCP920) for w in (56, 28, 7, 32, 13, 4)] == [14, 14, 7, 16, 13, None]


@pytest.mark.parametrize("fusion,kernel,stride", [("graphturbo", 3, 1), ("graphturbo", 1, 1),
                                                  ("stock", 1, 1), ("graphturbo", 3, 2),
                                                  ("graphturbo", 1, 2)])
def test_a_convolution_on_the_matrix_unit_computes_the_reference(fusion, kernel, stride):
    # 64 output channels of 56 x 56 maps: 16 channels of whole maps take 200 KB, so the kernel
    # tiles rows too to give the matrix unit tiles of 16 channels (GraphTurbo section 4.1). A
    # stride-2 convolution reads its input's rows in two phases (tvm_fusion_ext/target_dsa/
    # intrinsics.py).
    busy = unit_busy_matching_llvm(conv_relu((1, 64, 56, 56), 64, kernel, stride), fusion)
    assert busy["mme"] > 0 and busy["vme"] == 0


def test_a_strided_convolution_over_an_odd_row_width_computes_the_reference():
    # A padded row of 17 columns does not split into two phases evenly: the phased LB copy is
    # padded with zeros (transform_layout's pad_value), which no tap reads.
    mod = conv_relu((2, 16, 15, 15), 32, 3, stride=2)
    assert unit_busy_matching_llvm(mod, "graphturbo", seed=1)["mme"] > 0


def test_a_matrix_instruction_over_fewer_columns_costs_a_whole_one():
    # 10 calls of 16 x 14 x 16 (rows 56 wide): 35840 MACs, 140 cycles at 256 per cycle, but each
    # call is one 16 x 16 x 16 instruction of 16 cycles: 160.
    event = {"kind": "compute", "unit_kind": "matrix", "ops": 10 * 16 * 14 * 16, "calls": 10}
    model = {"name": "k", "buffers": {"ddr": 0, "gb": 0, "lb": 0}, "phases": [
        {"instances": 1, "cores": 1, "double_buffer": False, "events": [event]}]}
    prof = simulate({"k": model}, ["k"], STCP920)
    assert prof["cycles"] == STCP920.launch_cycles + 160
    assert prof["unit_busy"]["mme"] == 160


def test_a_convolution_keeps_the_fastest_of_the_tiles_that_fit(monkeypatch):
    """The largest tile that fits LB with the residual's tile (32 channels, two rows) reads the
    input once per four channel tiles; among the first tiles that fit, simulated, one over more
    channels and one row runs in fewer cycles, and is kept. The kernel computes the reference."""
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
        relax.transform.LegalizeOps()(shortcut_conv()))))
    func = next(f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc))
    chosen = schedule._default_decisions(func, STCP920)
    monkeypatch.setattr(schedule, "MAX_CONV_TRIALS", 1)
    largest = schedule._default_decisions(func, STCP920)
    cycles = {d.tile: kernel_cycles(schedule.evaluate(func, STCP920, d)[1], STCP920) for d in (chosen, largest)}
    assert largest.tile == (1, 32, 2, 28) and chosen.tile[1] > 32, (chosen, largest)
    assert cycles[chosen.tile] < 0.8 * cycles[largest.tile], cycles
    monkeypatch.undo()
    assert unit_busy_matching_llvm(shortcut_conv((1, 64, 28, 28)), "stock")["mme"] > 0

"""Reduction canonical forms (APOLLO section 4.1, Listings 3-5): classification and flattening."""

import numpy as np
import pytest
import tvm
from tir_cases import reductions
from tvm import s_tir

from tvm_fusion_ext.tir_passes import ReductionForm, canonicalize_reduction, reduction_form

CASES = [
    ("listing3", ReductionForm.Y, "listing4"),
    ("column_sum", ReductionForm.X, "column_sum_x_reduce"),
    ("total_sum", ReductionForm.ALL, "total_sum_all_reduce"),
]


@pytest.mark.parametrize("before, form, expected", CASES)
def test_form_and_flattening(before, form, expected):
    sch = s_tir.Schedule(getattr(reductions, before))
    assert reduction_form(sch, "b") is form
    got_form, loops = canonicalize_reduction(sch, "b")
    assert got_form is form and len(loops) == (1 if form is ReductionForm.ALL else 2)
    tvm.ir.assert_structural_equal(sch.mod["main"].without_attr("global_symbol"),
                                   getattr(reductions, expected).without_attr("global_symbol"))


def test_same_form_after_flattening():
    """Memory stitching matches forms before and after flattening alike."""
    sch = s_tir.Schedule(reductions.listing3)
    canonicalize_reduction(sch, "b")
    assert reduction_form(sch, "b") is ReductionForm.Y


def test_not_a_reduction_is_left_alone():
    sch = s_tir.Schedule(reductions.elementwise)
    assert reduction_form(sch, "b") is None
    assert canonicalize_reduction(sch, "b") is None
    tvm.ir.assert_structural_equal(sch.mod["main"], reductions.elementwise)


def test_flattened_listing4_computes_listing3():
    sch = s_tir.Schedule(reductions.listing3)
    canonicalize_reduction(sch, "b")
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), "llvm")
    a = np.random.default_rng(0).uniform(0.1, 1.0, (4, 6, 8, 10)).astype("float32")
    b = tvm.runtime.empty((4, 8), "float32")
    lib["main"](tvm.runtime.tensor(a), b)
    np.testing.assert_allclose(b.numpy(), a.sum(axis=(1, 3)), rtol=1e-5)

"""``driver.kernel_check``: a strategy's kernels checked one by one against their unscheduled
form, and a wrong kernel caught."""

import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.kernel_check import check_kernels, compare_kernel


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

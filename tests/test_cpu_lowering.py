"""The CPU backend's lowering: a kernel with several outputs costs the VM no tuple."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_fusion_ext.driver.build import build, run


@I.ir_module
class TwoOutputs:
    @T.prim_func(private=True, s_tir=True)
    def two(x: T.Buffer((4,), "float32"), a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("a"):
                vi = T.axis.remap("S", [i])
                a[vi] = x[vi] + T.float32(1)
        for i in range(4):
            with T.sblock("b"):
                vi = T.axis.remap("S", [i])
                b[vi] = x[vi] * T.float32(2)

    @T.prim_func(private=True, s_tir=True)
    def add(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32"), z: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("c"):
                vi = T.axis.remap("S", [i])
                z[vi] = x[vi] + y[vi]

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = TwoOutputs
        with R.dataflow():
            lv = R.call_tir(cls.two, (x,), out_ty=[R.Tensor((4,), "float32"), R.Tensor((4,), "float32")])
            c = R.call_tir(cls.add, (lv[0], lv[1]), out_ty=R.Tensor((4,), "float32"))
            R.output(c)
        return c


def test_a_kernel_with_two_outputs_makes_no_tuple_at_run_time():
    executable = build(TwoOutputs, "none", "llvm")
    assert "make_tuple" not in executable.as_text()
    x = np.random.default_rng(0).uniform(-1, 1, 4).astype("float32")
    np.testing.assert_allclose(run(executable, [x])[0], (x + 1) + x * 2, rtol=1e-6)

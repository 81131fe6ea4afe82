"""Fuzzing regression (scripts/fuzz.py --seed 603 --cases 1, shrunk).

* neoflow on llvm: mismatch: AssertionError: Not equal to tolerance rtol=0.0001, atol=0.0001
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('neoflow', 'llvm', 'mismatch'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((3,), dtype="float32"), x1: R.Tensor((1, 4, 5, 3), dtype="float32"), x2: R.Tensor((2, 4, 1, 1), dtype="float32"), x3: R.Tensor((1, 2, 3, 2), dtype="float32")) -> R.Tuple(R.Tensor((2, 2, 3, 2), dtype="float32"), R.Tensor((1, 2, 3, 2), dtype="float32"), R.Tensor((2, 2, 3, 2), dtype="float32"), R.Tensor((2, 2, 3, 2), dtype="float32")):
        with R.dataflow():
            lv: R.Tensor((1, 2, 3, 2), dtype="float32") = R.nn.conv2d(x1, x2, strides=[2, 2], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=None)
            lv1: R.Tensor((2, 2, 3, 2), dtype="float32") = R.concat((lv, x3), axis=0)
            lv2: R.Tensor((2, 2, 3, 2), dtype="float32") = R.nn.relu(lv1)
            lv3: R.Tensor((2, 2, 3, 2), dtype="float32") = R.nn.relu(lv2)
            gv: R.Tensor((2, 2, 3, 2), dtype="float32") = lv3
            gv1: R.Tensor((1, 2, 3, 2), dtype="float32") = lv
            gv2: R.Tensor((2, 2, 3, 2), dtype="float32") = lv1
            gv3: R.Tensor((2, 2, 3, 2), dtype="float32") = lv2
            R.output(gv, gv1, gv2, gv3)
        return (gv, gv1, gv2, gv3)

"""Fuzzing regression (scripts/fuzz.py --seed 5270 --cases 1, shrunk; found after 257f599, and
failing on the code before it too).

A concat of one tensor with itself after a conv (conv -> concat((y, y, y)) -> relu -> relu, every
value an output). After FuseTIR the concat block's ``T.reads`` keeps one region of the conv output,
``[v - 2]``, while its body loads it at ``[v]``, ``[v - 1]`` and ``[v - 2]``. GraphTurbo's DSA
layer form staged that one slice per tile, so two of the three concat parts read LB that was
never written (NaN). A buffer a block loads at several different indices is now read in place
(``kernel_model.read_in_place``).

* graphturbo on dsa/stcp920: mismatch: AssertionError: Not equal to tolerance rtol=0.0001, atol=0.0001
* graphturbo-instances on dsa/stcp920: mismatch: AssertionError: Not equal to tolerance rtol=0.0001, atol=0.0001
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('graphturbo', 'dsa/stcp920', 'mismatch'),
    ('graphturbo-instances', 'dsa/stcp920', 'mismatch'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((3, 3, 5), dtype="float32"), x1: R.Tensor((1, 4, 7, 5), dtype="float32"), x2: R.Tensor((2, 4, 1, 1), dtype="float32")) -> R.Tuple(R.Tensor((3,), dtype="float32"), R.Tensor((3, 2, 9, 7), dtype="float32"), R.Tensor((1, 2, 9, 7), dtype="float32"), R.Tensor((3, 2, 9, 7), dtype="float32"), R.Tensor((3, 2, 9, 7), dtype="float32")):
        with R.dataflow():
            lv: R.Tensor((3,), dtype="float32") = R.mean(x0, axis=[-3, -1], keepdims=False)
            lv1: R.Tensor((1, 2, 9, 7), dtype="float32") = R.nn.conv2d(x1, x2, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=None)
            lv2: R.Tensor((3, 2, 9, 7), dtype="float32") = R.concat((lv1, lv1, lv1), axis=0)
            lv3: R.Tensor((3, 2, 9, 7), dtype="float32") = R.nn.relu(lv2)
            lv4: R.Tensor((3, 2, 9, 7), dtype="float32") = R.nn.relu(lv3)
            gv: R.Tensor((3,), dtype="float32") = lv
            gv1: R.Tensor((3, 2, 9, 7), dtype="float32") = lv4
            gv2: R.Tensor((1, 2, 9, 7), dtype="float32") = lv1
            gv3: R.Tensor((3, 2, 9, 7), dtype="float32") = lv2
            gv4: R.Tensor((3, 2, 9, 7), dtype="float32") = lv3
            R.output(gv, gv1, gv2, gv3, gv4)
        return (gv, gv1, gv2, gv3, gv4)

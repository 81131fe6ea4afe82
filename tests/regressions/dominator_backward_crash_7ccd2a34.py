"""Fuzzing regression (tests/test_fuzz.py, hypothesis seed 0).

* dominator-backward on llvm: crash: ValueError: There must be an in-place index specified for each output
* dominator-both on llvm: crash: ValueError: There must be an in-place index specified for each output
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('dominator-backward', 'llvm', 'crash'),
    ('dominator-both', 'llvm', 'crash'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((1, 4, 6), dtype="float32"), x1: R.Tensor((1, 4, 6), dtype="float32")) -> R.Tuple(R.Tensor((2, 6), dtype="float32"), R.Tensor((1, 6), dtype="float32"), R.Tensor((6, 1), dtype="float32"), R.Tensor((4, 6), dtype="float32"), R.Tensor((1, 6), dtype="float32")):
        with R.dataflow():
            lv: R.Tensor((1, 4, 6), dtype="float32") = R.add(x0, x1)
            lv1: R.Tensor((4, 6), dtype="float32") = R.sum(lv, axis=[0], keepdims=False)
            lv2: R.Tensor((4, 6), dtype="float32") = R.nn.relu(lv1)
            lv3: R.Tuple(R.Tensor((2, 6), dtype="float32"), R.Tensor((1, 6), dtype="float32"), R.Tensor((1, 6), dtype="float32")) = R.split(lv2, indices_or_sections=[2, 3], axis=0)
            lv4: R.Tensor((2, 6), dtype="float32") = lv3[0]
            lv5: R.Tensor((1, 6), dtype="float32") = lv3[1]
            lv6: R.Tensor((1, 6), dtype="float32") = lv3[2]
            lv7: R.Tensor((6, 1), dtype="float32") = R.permute_dims(lv5, axes=[1, 0])
            gv: R.Tensor((2, 6), dtype="float32") = lv4
            gv1: R.Tensor((1, 6), dtype="float32") = lv6
            gv2: R.Tensor((6, 1), dtype="float32") = lv7
            gv3: R.Tensor((4, 6), dtype="float32") = lv2
            gv4: R.Tensor((1, 6), dtype="float32") = lv5
            R.output(gv, gv1, gv2, gv3, gv4)
        return (gv, gv1, gv2, gv3, gv4)

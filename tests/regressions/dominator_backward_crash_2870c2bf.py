"""Fuzzing regression (scripts/fuzz.py --seed 34021 --cases 1, shrunk).

* dominator-backward on llvm: crash: PartitionError: the partition's groups depend on each other in a cycle
* dominator-both on llvm: crash: PartitionError: the partition's groups depend on each other in a cycle
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
    def main(x0: R.Tensor((1,), dtype="float32"), x1: R.Tensor((4,), dtype="float32"), x2: R.Tensor((6, 1), dtype="float32")) -> R.Tuple(R.Tensor((7,), dtype="float32"), R.Tensor((2,), dtype="float32"), R.Tensor((), dtype="float32"), R.Tensor((6, 1, 1, 1), dtype="float32"), R.Tensor((6,), dtype="float32"), R.Tensor((6,), dtype="float32"), R.Tensor((6,), dtype="float32"), R.Tensor((7,), dtype="float32"), R.Tensor((1,), dtype="float32")):
        with R.dataflow():
            lv: R.Tensor((6,), dtype="float32") = R.concat((x0, x1, x0), axis=0)
            lv1: R.Tensor((1,), dtype="float32") = R.exp(x0)
            lv2: R.Tensor((1,), dtype="int64") = R.arange(0, 1, 1, dtype="int64")
            lv3: R.Tensor((1,), dtype="float32") = R.take(lv1, lv2, axis=0, mode="clip")
            lv4: R.Tensor((6,), dtype="float32") = R.sigmoid(lv)
            lv5: R.Tensor((6,), dtype="float32") = R.sigmoid(lv)
            lv6: R.Tensor((6,), dtype="float32") = R.sigmoid(lv)
            lv7: R.Tensor((6,), dtype="float32") = R.add(lv4, lv5)
            lv8: R.Tensor((6,), dtype="float32") = R.add(lv7, lv6)
            lv9: R.Tensor((7,), dtype="float32") = R.concat((lv8, lv1), axis=0)
            lv10: R.Tensor((1,), dtype="float32") = R.matmul(lv4, x2, out_dtype=None)
            lv11: R.Tensor((7,), dtype="float32") = R.tanh(lv9)
            lv12: R.Tensor((2,), dtype="float32") = R.concat((lv3, lv10), axis=0)
            lv13: R.Tensor((), dtype="float32") = R.min(lv5, axis=[-1], keepdims=False)
            lv14: R.Tensor((6, 1, 1, 1), dtype="float32") = R.reshape(lv6, R.shape([6, 1, 1, 1]))
            gv: R.Tensor((7,), dtype="float32") = lv11
            gv1: R.Tensor((2,), dtype="float32") = lv12
            gv2: R.Tensor((), dtype="float32") = lv13
            gv3: R.Tensor((6, 1, 1, 1), dtype="float32") = lv14
            gv4: R.Tensor((6,), dtype="float32") = lv
            gv5: R.Tensor((6,), dtype="float32") = lv4
            gv6: R.Tensor((6,), dtype="float32") = lv5
            gv7: R.Tensor((7,), dtype="float32") = lv9
            gv8: R.Tensor((1,), dtype="float32") = lv10
            R.output(gv, gv1, gv2, gv3, gv4, gv5, gv6, gv7, gv8)
        return (gv, gv1, gv2, gv3, gv4, gv5, gv6, gv7, gv8)

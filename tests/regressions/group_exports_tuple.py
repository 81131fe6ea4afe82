"""Fuzzing regression (scripts/fuzz.py --seed 18: a group exporting split's whole tuple; shrunk with shrink_choices on the fusion stage).

* graphturbo on llvm: ill-formed: InvariantError: the module is not well-formed after pass FuseTIRInner
* graphturbo-instances on llvm: ill-formed: InvariantError: the module is not well-formed after pass FuseTIRInner
* graphturbo-lb on llvm: ill-formed: InvariantError: the module is not well-formed after pass FuseTIRInner
* graphturbo-gb on llvm: ill-formed: InvariantError: the module is not well-formed after pass FuseTIRInner
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('graphturbo', 'llvm', 'ill-formed'),
    ('graphturbo-instances', 'llvm', 'ill-formed'),
    ('graphturbo-lb', 'llvm', 'ill-formed'),
    ('graphturbo-gb', 'llvm', 'ill-formed'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((2,), dtype="float32")) -> R.Tuple(R.Tensor((1,), dtype="float32"), R.Tensor((1,), dtype="float32"), R.Tensor((2,), dtype="float32")):
        with R.dataflow():
            lv: R.Tensor((2,), dtype="float32") = R.nn.relu(x0)
            lv1: R.Tuple(R.Tensor((1,), dtype="float32"), R.Tensor((1,), dtype="float32")) = R.split(lv, indices_or_sections=[1], axis=0)
            lv2: R.Tensor((1,), dtype="float32") = lv1[0]
            lv3: R.Tensor((1,), dtype="float32") = lv1[1]
            R.output(lv, lv2, lv3)
        return (lv2, lv3, lv)

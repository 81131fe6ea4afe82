"""Fuzzing regression (scripts/fuzz.py --seed 235 --cases 1, shrunk).

* graphturbo on dsa/stcp920: crash: IndexError: list index out of range
* graphturbo-instances on dsa/stcp920: crash: IndexError: list index out of range
* graphturbo-lb on dsa/stcp920: crash: IndexError: list index out of range
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('graphturbo', 'dsa/stcp920', 'crash'),
    ('graphturbo-instances', 'dsa/stcp920', 'crash'),
    ('graphturbo-lb', 'dsa/stcp920', 'crash'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((1,), dtype="float32")) -> R.Tensor((), dtype="float32"):
        with R.dataflow():
            lv: R.Tensor((), dtype="float32") = R.sum(x0, axis=[0], keepdims=False)
            gv: R.Tensor((), dtype="float32") = lv
            R.output(gv)
        return gv

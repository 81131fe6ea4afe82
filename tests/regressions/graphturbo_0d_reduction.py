"""Fuzzing regression (scripts/fuzz.py --seed 44, shrunk with shrink_choices on the fusion stage; graphturbo's split_maps on a 0-d output).

* graphturbo on llvm: crash: IndexError: tuple index out of range
* graphturbo-instances on llvm: crash: IndexError: tuple index out of range
* graphturbo-lb on llvm: crash: IndexError: tuple index out of range
* graphturbo-gb on llvm: crash: IndexError: tuple index out of range

Found again by the 2000-seed run (seed 235) on dsa/stcp920, after the llvm fix:
* graphturbo, graphturbo-instances, graphturbo-lb on dsa/stcp920: crash: IndexError: list index
  out of range (a 0-d output has no loop to split into per-core pieces)
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('graphturbo', 'llvm', 'crash'),
    ('graphturbo-instances', 'llvm', 'crash'),
    ('graphturbo-lb', 'llvm', 'crash'),
    ('graphturbo-gb', 'llvm', 'crash'),
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
            R.output(lv)
        return lv

"""Fuzzing regression (tests/test_fuzz.py, hypothesis seed 1): a 1x1 conv whose output variable
is bound to another (``gv = lv``); PointwiseConvAsMatmul's pattern matched the alias too and
read attributes off it.

* none (reference) on llvm: reference: AttributeError: 'DataflowVar' object has no attribute 'attrs'
"""

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # noqa: F401

# (strategy, target, kind) that failed when this file was written.
FAILED = [
    ('none (reference)', 'llvm', 'reference'),
]
# strategy -> reason, for failures not fixed yet (checked as strict xfails).
XFAIL: dict = {}

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((1,), dtype="float32"), x1: R.Tensor((1, 1, 3, 3), dtype="float32"), x2: R.Tensor((1, 1, 1, 1), dtype="float32")) -> R.Tensor((1, 1, 3, 3), dtype="float32"):
        with R.dataflow():
            lv: R.Tensor((1, 1, 3, 3), dtype="float32") = R.nn.conv2d(x1, x2, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=None)
            gv: R.Tensor((1, 1, 3, 3), dtype="float32") = lv
            R.output(gv)
        return gv

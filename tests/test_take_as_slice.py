"""TakeAtConstantAsSlice: ``take`` of an integer tensor at one constant index in range becomes a
slice and a squeeze; a take at an index tensor, of a constant out of range, or of floats is left
as it is."""

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.relax_passes.take_as_slice import TakeAtConstantAsSlice


def _take(index: relax.Expr, axis: int = 1, dtype: str = "int64"):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 5, 3), dtype))
    params = [x] + ([index] if isinstance(index, relax.Var) else [])
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.take(x, index, axis=axis))
        bb.emit_func_output(out)
    return bb.get()


def _expected(position: int, axis: int = 1):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 5, 3), "int64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            sliced = relax.op.strided_slice(x, axes=[axis], begin=[position], end=[position + 1])
            out = bb.emit_output(relax.op.squeeze(sliced, axis=[axis]))
        bb.emit_func_output(out)
    return bb.get()


def test_a_take_at_a_constant_index_becomes_a_slice():
    rewrite = TakeAtConstantAsSlice()
    mod = _take(relax.const(3, "int64"))
    after = rewrite(mod)
    assert rewrite.rewritten == 1
    tvm.ir.assert_structural_equal(after, _expected(3))
    x = np.random.default_rng(0).integers(-100, 100, (4, 5, 3)).astype("int64")
    run = [relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
           for m in (mod, after)]
    np.testing.assert_array_equal(run[0], run[1])
    np.testing.assert_array_equal(run[1], x[:, 3])


def test_takes_it_cannot_prove_a_slice_are_left_alone():
    rewrite = TakeAtConstantAsSlice()
    for mod in (_take(relax.Var("i", relax.TensorType((2,), "int64"))),    # an index tensor
                _take(relax.const(5, "int64")),                             # out of range
                _take(relax.const(np.array([1, 2], "int64"))),              # not a scalar
                _take(relax.const(3, "int64"), dtype="float32")):           # not indices
        tvm.ir.assert_structural_equal(rewrite(mod), mod)
    assert rewrite.rewritten == 0

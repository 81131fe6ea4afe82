"""Simplify (MindSpore graph simplification): one Before/Expected pair per rule, plus the fixed point."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.relax_passes.simplify import Simplify


def _simplify(mod):
    sim = Simplify()
    return sim(mod), sim


# ---- x + 0, 0 + x, x - 0 -----------------------------------------------------------------------
@I.ir_module
class AddZero:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.add(x, R.const(0.0, "float32"))
            b = R.add(R.const(0.0, "float32"), a)
            c = R.subtract(b, R.const(0.0, "float32"))
            d = R.nn.relu(c)
            R.output(d)
        return d


@I.ir_module
class AddZerosOp:  # what relax.transform.Gradient emits to start an accumulation
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            z = R.zeros(R.shape([4, 8]), "float32")
            a = R.add(z, x)
            d = R.nn.relu(a)
            R.output(d)
        return d


# ---- x * 1, x / 1 --------------------------------------------------------------------------------
@I.ir_module
class MulOne:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.multiply(x, R.const(1.0, "float32"))
            b = R.divide(a, R.const(1.0, "float32"))
            d = R.nn.relu(b)
            R.output(d)
        return d


# ---- x * 0, x - x -------------------------------------------------------------------------------
@I.ir_module
class MulZero:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.multiply(x, R.const(0.0, "float32"))
            b = R.exp(a)
            R.output(b)
        return b


@I.ir_module
class MulZeroExpected:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.zeros(R.shape([4, 8]), "float32")
            b = R.exp(a)
            R.output(b)
        return b


@I.ir_module
class SubSelf:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.subtract(x, x)
            b = R.exp(a)
            R.output(b)
        return b


# ---- double negation, double transpose -------------------------------------------------------
@I.ir_module
class NegNeg:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.negative(x)
            b = R.negative(a)
            d = R.nn.relu(b)
            R.output(d)
        return d


@I.ir_module
class DoubleTranspose:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            a = R.permute_dims(x, axes=[1, 0, 2])
            b = R.permute_dims(a, axes=[1, 0, 2])
            c = R.permute_dims(b, axes=[2, 0, 1])
            d = R.permute_dims(c, axes=[0, 2, 1])
            R.output(d)
        return d


@I.ir_module
class DoubleTransposeExpected:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            d = R.permute_dims(x, axes=[2, 1, 0])
            R.output(d)
        return d


# ---- reshape chains, identity reshape, no-task ops --------------------------------------------
@I.ir_module
class ReshapeChain:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            a = R.reshape(x, R.shape([6, 4]))
            b = R.reshape(a, R.shape([24]))
            c = R.reshape(b, R.shape([4, 6]))
            R.output(c)
        return c


@I.ir_module
class ReshapeChainExpected:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            c = R.reshape(x, R.shape([4, 6]))
            R.output(c)
        return c


@I.ir_module
class ReshapeBack:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            a = R.reshape(x, R.shape([6, 4]))
            b = R.reshape(a, R.shape([2, 3, 4]))
            d = R.nn.relu(b)
            R.output(d)
        return d


@I.ir_module
class ReluOfX3:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            d = R.nn.relu(x)
            R.output(d)
        return d


@I.ir_module
class NoTask:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            a = R.expand_dims(x, axis=[0])
            b = R.squeeze(a, axis=[0])
            c = R.flatten(b)
            R.output(c)
        return c


@I.ir_module
class NoTaskExpected:
    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            c = R.reshape(x, R.shape([24]))
            R.output(c)
        return c


# ---- identity casts ---------------------------------------------------------------------------
@I.ir_module
class IdentityCast:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.astype(x, "float32")
            d = R.nn.relu(a)
            R.output(d)
        return d


@I.ir_module
class ReluOfX:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            d = R.nn.relu(x)
            R.output(d)
        return d


# ---- concat of the slices of one tensor (left by parallel fusion) ------------------------------
@I.ir_module
class ConcatSlices:
    @R.function
    def main(x: R.Tensor((2, 10), "float32")):
        with R.dataflow():
            a = R.strided_slice(x, axes=[1], begin=[0], end=[4])
            b = R.strided_slice(x, axes=[1], begin=[4], end=[10])
            c = R.concat((a, b), axis=1)
            d = R.nn.relu(c)
            R.output(d)
        return d


@I.ir_module
class ConcatSlicesGap:  # rejected: the slices skip columns 4..5, so the concat is no identity
    @R.function
    def main(x: R.Tensor((2, 10), "float32")):
        with R.dataflow():
            a = R.strided_slice(x, axes=[1], begin=[0], end=[4])
            b = R.strided_slice(x, axes=[1], begin=[6], end=[10])
            c = R.concat((a, b), axis=1)
            R.output(c)
        return c


# ---- private function inlining + CSE + DCE to a fixed point -----------------------------------
@I.ir_module
class InlineCse:
    @R.function(private=True)
    def helper(x: R.Tensor((4, 8), "float32")) -> R.Tensor((4, 8), "float32"):
        y = R.multiply(x, R.const(1.0, "float32"))
        return y

    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        cls = InlineCse
        with R.dataflow():
            a = cls.helper(x)
            b = R.exp(a)
            c = R.exp(x)
            unused = R.sigmoid(x)  # noqa: F841 - dead code for DCE
            d = R.add(b, c)
            R.output(d)
        return d


@I.ir_module
class InlineCseExpected:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            b = R.exp(x)
            d = R.add(b, b)
            R.output(d)
        return d


@pytest.mark.parametrize("before, expected, rule", [
    (AddZero, ReluOfX, "add_zero"),
    (AddZerosOp, ReluOfX, "add_zero"),
    (MulOne, ReluOfX, "mul_one"),
    (MulZero, MulZeroExpected, "mul_zero"),
    (SubSelf, MulZeroExpected, "sub_self"),
    (NegNeg, ReluOfX, "neg_neg"),
    (DoubleTranspose, DoubleTransposeExpected, "transpose"),
    (ReshapeChain, ReshapeChainExpected, "reshape"),
    (ReshapeBack, ReluOfX3, "reshape"),
    (NoTask, NoTaskExpected, "no_task"),
    (IdentityCast, ReluOfX, "cast"),
    (ConcatSlices, None, "concat_slices"),
    (InlineCse, InlineCseExpected, "mul_one"),
])
def test_rule(before, expected, rule):
    after, sim = _simplify(before)
    assert sim.counters[rule] >= 1, dict(sim.counters)
    if expected is None:  # ConcatSlices: relu of the (2, 10) input
        assert [b.value.op.name for b in after["main"].body.blocks[0].bindings] == ["relax.nn.relu"]
        assert after["main"].body.blocks[0].bindings[0].value.args[0].same_as(after["main"].params[0])
        return
    tvm.ir.assert_structural_equal(after, expected)


def test_rejects_unrelated_slices():
    after, sim = _simplify(ConcatSlicesGap)
    tvm.ir.assert_structural_equal(after, ConcatSlicesGap)
    assert sim.counters["concat_slices"] == 0


def test_broadcasting_add_zero_kept():
    """x + zeros of a larger shape broadcasts x: not an identity, so it must stay."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, relax.const(np.zeros((4, 8), "float32"))))
        bb.emit_func_output(out)
    mod = bb.get()
    after, sim = _simplify(mod)
    assert sim.counters["add_zero"] == 0
    tvm.ir.assert_structural_equal(after, mod)


def test_fixed_point_is_stable():
    after, _ = _simplify(InlineCse)
    again, sim2 = _simplify(after)
    tvm.ir.assert_structural_equal(after, again)
    assert sim2.rounds == 1 and sum(sim2.counters.values()) == 0


@I.ir_module
class ConcatBranches:  # what parallel fusion leaves when each conv had its own bias
    @R.function
    def main(y: R.Tensor((2, 10), "float32"), c0: R.Tensor((1, 4), "float32"),
             c1: R.Tensor((1, 6), "float32")):
        with R.dataflow():
            a = R.strided_slice(y, axes=[1], begin=[0], end=[4])
            b = R.strided_slice(y, axes=[1], begin=[4], end=[10])
            a2 = R.add(a, c0)
            b2 = R.add(b, c1)
            d = R.concat((a2, b2), axis=1)
            R.output(d)
        return d


@I.ir_module
class ConcatBranchesExpected:
    @R.function
    def main(y: R.Tensor((2, 10), "float32"), c0: R.Tensor((1, 4), "float32"),
             c1: R.Tensor((1, 6), "float32")):
        with R.dataflow():
            lv = R.concat((c0, c1), axis=1)
            d = R.add(y, lv)
            R.output(d)
        return d


def test_concat_branches():
    after, sim = _simplify(ConcatBranches)
    assert sim.counters["concat_branches"] == 1
    tvm.ir.assert_structural_equal(after, ConcatBranchesExpected)

"""FoldBatchNormIntoConv: a constant inference batch norm after an NCHW conv becomes the conv's
weights and one bias add; weights that are inputs and training-mode norms are left as they are."""

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.relax_passes.fold_batch_norm import FoldBatchNormIntoConv

RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((8, 4, 3, 3)).astype("float32")
GAMMA, BETA, MEAN = (RNG.standard_normal(8).astype("float32") for _ in range(3))
VAR = RNG.uniform(0.5, 2.0, 8).astype("float32")


def _conv_bn(weight=None, training=False):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 10, 10), "float32"))
    w = weight if weight is not None else relax.const(WEIGHT)
    with bb.function("main", [x] if weight is None else [x, weight]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
            norm = bb.emit(relax.op.nn.batch_norm(conv, *map(relax.const, (GAMMA, BETA, MEAN, VAR)),
                                                  axis=1, epsilon=1e-5, training=training))
            out = bb.emit_output(relax.TupleGetItem(norm, 0))
        bb.emit_func_output(out)
    return bb.get()


def _expected():
    scale = GAMMA.astype("float64") / np.sqrt(VAR.astype("float64") + 1e-5)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 10, 10), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            kernel = (WEIGHT * scale.reshape(-1, 1, 1, 1)).astype("float32")
            bias = (BETA - MEAN * scale).astype("float32").reshape(1, -1, 1, 1)
            conv = bb.emit(relax.op.nn.conv2d(x, relax.const(kernel), padding=1))
            out = bb.emit_output(relax.op.add(conv, relax.const(bias)))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, *args):
    ex = tvm.compile(mod, "llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, args)).numpy()


def test_batch_norm_becomes_weights_and_a_bias_add():
    fold = FoldBatchNormIntoConv()
    after = relax.transform.DeadCodeElimination()(fold(_conv_bn()))
    tvm.ir.assert_structural_equal(after, _expected())
    assert fold.folded == 1


def test_folded_model_computes_the_same_numbers():
    x = RNG.standard_normal((1, 4, 10, 10)).astype("float32")
    before = _conv_bn()
    np.testing.assert_allclose(_run(FoldBatchNormIntoConv()(before), x), _run(before, x), rtol=1e-5, atol=1e-5)


def test_weights_that_are_inputs_and_training_norms_are_left_alone():
    weight = relax.Var("w", relax.TensorType((8, 4, 3, 3), "float32"))
    for mod in (_conv_bn(weight=weight), _conv_bn(training=True)):
        fold = FoldBatchNormIntoConv()
        tvm.ir.assert_structural_equal(fold(mod), mod)
        assert fold.folded == 0

"""Training steps as one Relax function: forward + backward + SGD update (NeoFlow section 5.1).

NeoFlow fuses *training* graphs, where the forward and backward passes are coupled: a forward
intermediate removed by fusion is one the backward pass may need (then it stays materialised, or is
recomputed; the reward of :mod:`tvm_fusion_ext.partitioners.neoflow` decides). To let every fusion
strategy see both passes at once, :func:`training_step` builds the whole step as one dataflow block:

1. ``relax.transform.Gradient`` differentiates a scalar loss function (``<loss>_adjoint`` returns
   the loss and the gradients of the chosen parameters);
2. a ``main`` function calls the adjoint and applies SGD (``p - lr * dp``) to every parameter,
   returning ``(loss, new parameters...)``;
3. the adjoint is made private and inlined, and the result canonicalised into one dataflow block.

:func:`train` then runs ``steps`` iterations of a step compiled under any fusion strategy, feeding
the updated parameters back, and returns the losses. Two model builders give the workloads of the
issue: :func:`mlp_loss` (two-layer MLP, MSE) and :func:`lltm_loss` (the LLTM cell of the zoo, in
Relax ops that ``Gradient`` differentiates, MSE on the new hidden state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from .build import build

LOSS = "loss"


@dataclass
class TrainingProblem:
    """A loss module plus its data: ``inputs`` (not trained) and initial ``params`` (trained)."""

    loss_module: tvm.IRModule
    inputs: list[np.ndarray]
    params: list[np.ndarray]


def training_step(loss_module: tvm.IRModule, num_inputs: int, learning_rate: float,
                  loss_name: str = LOSS) -> tvm.IRModule:
    """``main(inputs..., params...) -> (loss, new params...)`` in one dataflow block.

    The first ``num_inputs`` parameters of ``loss_module[loss_name]`` are data; the rest are
    trained by one SGD step with ``learning_rate``.
    """
    loss_func = loss_module[loss_name]
    trained = list(loss_func.params[num_inputs:])
    grad_mod = relax.transform.Gradient(loss_name, require_grads=trained)(loss_module)
    adjoint = grad_mod[f"{loss_name}_adjoint"].without_attr("global_symbol")

    bb = relax.BlockBuilder()
    adjoint_gv = bb.add_func(adjoint, f"{loss_name}_adjoint")
    params = [relax.Var(p.name, p.ty) for p in loss_func.params]
    with bb.function("main", params):
        with bb.dataflow():
            result = bb.emit(relax.Call(adjoint_gv, params))
            loss = bb.emit(relax.TupleGetItem(result, 0))
            grads = bb.emit(relax.TupleGetItem(result, 1))
            updated = []
            for i, param in enumerate(params[num_inputs:]):
                grad = bb.emit(relax.TupleGetItem(grads, i))
                step = relax.op.multiply(relax.const(learning_rate, str(param.ty.dtype)), grad)
                updated.append(bb.emit(relax.op.subtract(param, step), name_hint=f"{param.name}_new"))
            out = bb.emit_output(relax.Tuple([loss, *updated]))
        bb.emit_func_output(out)
    mod = bb.get()
    return tvm.transform.Sequential([
        relax.transform.InlinePrivateFunctions(),
        relax.transform.ConvertToDataflow(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(["main"]),
    ])(mod)


def train(step_module: tvm.IRModule, problem: TrainingProblem, steps: int,
          fusion: str | tvm.transform.Pass = "none", target="llvm", policy: str = "untuned"
          ) -> list[float]:
    """Compile ``step_module`` under ``fusion`` and run ``steps`` SGD steps; returns the losses."""
    vm = relax.VirtualMachine(build(step_module, fusion, target, policy), tvm.cpu())
    inputs = [tvm.runtime.tensor(x) for x in problem.inputs]
    params = [tvm.runtime.tensor(p) for p in problem.params]
    losses = []
    for _ in range(steps):
        result = vm["main"](*inputs, *params)
        losses.append(float(result[0].numpy()))
        params = [result[i] for i in range(1, len(params) + 1)]
    return losses


def mlp_loss(batch: int = 4, features: int = 8, hidden: int = 16, outputs: int = 2,
             seed: int = 0) -> TrainingProblem:
    """Two-layer MLP ``relu(x @ w1 + b1) @ w2 + b2`` with mean-squared error against ``y``."""
    rng = np.random.default_rng(seed)
    names_shapes = [("x", (batch, features)), ("y", (batch, outputs)), ("w1", (features, hidden)),
                    ("b1", (hidden,)), ("w2", (hidden, outputs)), ("b2", (outputs,))]
    v = {n: relax.Var(n, relax.TensorType(s, "float32")) for n, s in names_shapes}
    bb = relax.BlockBuilder()
    with bb.function(LOSS, list(v.values())):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(v["x"], v["w1"]), v["b1"])))
            o = bb.emit(relax.op.add(relax.op.matmul(h, v["w2"]), v["b2"]))
            d = bb.emit(relax.op.subtract(o, v["y"]))
            loss = bb.emit_output(relax.op.mean(relax.op.multiply(d, d)))
        bb.emit_func_output(loss)
    arrays = [(rng.standard_normal(s) * (0.5 if n.startswith(("w", "b")) else 1.0)).astype("float32")
              for n, s in names_shapes]
    return TrainingProblem(bb.get(), arrays[:2], arrays[2:])


def lltm_loss(batch: int = 4, input_features: int = 8, state_size: int = 8,
              seed: int = 0) -> TrainingProblem:
    """The LLTM cell (zoo ``lltm``) and MSE of its new hidden state against ``target``.

    ``elu(c)`` is written ``relu(c) + exp(-relu(-c)) - 1`` so that every op has a gradient.
    """
    rng = np.random.default_rng(seed)
    s = state_size
    names_shapes = [("x", (batch, input_features)), ("h", (batch, s)), ("cell", (batch, s)),
                    ("target", (batch, s)), ("w", (s + input_features, 3 * s)), ("b", (3 * s,))]
    v = {n: relax.Var(n, relax.TensorType(shape, "float32")) for n, shape in names_shapes}
    op = relax.op
    bb = relax.BlockBuilder()
    with bb.function(LOSS, list(v.values())):
        with bb.dataflow():
            gates = bb.emit(op.add(op.matmul(op.concat([v["h"], v["x"]], axis=1), v["w"]), v["b"]))
            split = bb.emit(op.split(gates, 3, axis=1))
            parts = [bb.emit(relax.TupleGetItem(split, i)) for i in range(3)]
            input_gate, output_gate, candidate = parts
            one = relax.const(1.0, "float32")
            elu = bb.emit(op.subtract(op.add(op.nn.relu(candidate),
                                             op.exp(op.negative(op.nn.relu(op.negative(candidate))))),
                                      one))
            new_cell = bb.emit(op.add(v["cell"], op.multiply(elu, op.sigmoid(input_gate))))
            new_h = bb.emit(op.multiply(op.tanh(new_cell), op.sigmoid(output_gate)))
            d = bb.emit(op.subtract(new_h, v["target"]))
            loss = bb.emit_output(op.mean(op.multiply(d, d)))
        bb.emit_func_output(loss)
    arrays = [(rng.standard_normal(shape) * (0.3 if n in ("w", "b") else 1.0)).astype("float32")
              for n, shape in names_shapes]
    return TrainingProblem(bb.get(), arrays[:4], arrays[4:])

"""Attention PrimFuncs built with TE and TOPI's softmax (the blocks TVM's legalisation gives), with
the variations the attention matcher must take or decline, and a CPU reference run of them:
shared by the FlashAttention (GPU) and CPUAttention tests."""

import numpy as np
import tvm
from tvm import te, topi


def attention(batch=(2,), queries=40, keys=24, dim=16, head=8, scale=("divide", 4.0), axis=-1,
              key_layout="bcj", value_layout="bjd", mask=False, subtract_max=True, dtype="float32",
              value_row="key"):
    """``softmax(Q·Kᵀ scaled) · V`` as a PrimFunc built with TE and TOPI's softmax (the blocks
    TVM's legalisation gives), with the variations the matcher must take or decline."""
    nb = len(batch)
    q = te.placeholder((*batch, queries, dim), dtype, "q")
    k = te.placeholder((*batch, dim, keys) if key_layout == "bcj" else (*batch, keys, dim), dtype, "k")
    v = te.placeholder((*batch, keys, head) if value_layout == "bjd" else (*batch, head, keys), dtype, "v")
    c = te.reduce_axis((0, dim), "c")

    def key(b, j, cc):
        return k[(*b, cc, j)] if key_layout == "bcj" else k[(*b, j, cc)]

    scores = te.compute((*batch, queries, keys), lambda *ax: te.sum(
        q[(*ax[:nb], ax[nb], c)] * key(ax[:nb], ax[nb + 1], c), axis=c), "scores")
    params = [q, k, v]
    if scale is not None:
        op, value = scale
        const = tvm.tirx.const(value, dtype)
        scores = te.compute(scores.shape, lambda *ax: scores(*ax) / const if op == "divide"
                            else scores(*ax) * const, "scaled")
    if mask:
        bias = te.placeholder(scores.shape, dtype, "mask")
        scores = te.compute(scores.shape, lambda *ax: scores(*ax) + bias(*ax), "masked")
        params.append(bias)
    if subtract_max:
        probs = topi.nn.softmax(scores, axis=axis)
    else:
        j = te.reduce_axis((0, keys), "j")
        total = te.compute(scores.shape[:-1], lambda *ax: te.sum(te.exp(scores[(*ax, j)]), axis=j), "total")
        probs = te.compute(scores.shape, lambda *ax: te.exp(scores(*ax)) / total(*ax[:-1]), "probs")
    j = te.reduce_axis((0, keys), "jv")

    def value(b, i, jj, d):
        row = jj if value_row == "key" else i
        return v[(*b, row, d)] if value_layout == "bjd" else v[(*b, d, row)]

    out = te.compute((*batch, queries, head), lambda *ax: te.sum(
        probs[(*ax[:nb], ax[nb], j)] * value(ax[:nb], ax[nb], j, ax[nb + 1]), axis=j), "out")
    return te.create_prim_func([*params, out]).with_attr("tirx.noalias", True)


def run_reference(func, inputs):
    """``func``'s output on ``inputs``, built for the CPU (the reference: its blocks as written)."""
    executable = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), "llvm")
    args = [tvm.runtime.tensor(x) for x in inputs]
    out = tvm.runtime.empty([int(x) for x in func.params[-1].ty.shape], "float32")
    executable["main"](*args, out)
    return out.numpy()


def random_inputs(func, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(x) for x in p.ty.shape]).astype("float32") for p in func.params[:-1]]


# Layouts and scales the matcher takes (keyword arguments of attention()).
VARIANTS = {
    "divide by a constant": {},
    "multiply by a constant": {"scale": ("multiply", 0.125)},
    "no scale": {"scale": None},
    "K not transposed": {"key_layout": "bjc"},
    "V transposed": {"value_layout": "bdj"},
    "two batch axes": {"batch": (2, 3), "queries": 5, "keys": 70},
    "no batch axis": {"batch": (), "queries": 33, "keys": 65},
}

# Near-misses the matcher declines.
NEAR_MISSES = {
    "softmax over the query axis": {"axis": -2},
    "a mask added to the scores": {"mask": True},
    "no max subtracted": {"subtract_max": False},
    "V read at the query, not the key": {"value_row": "query", "keys": 40},
    "float16": {"dtype": "float16"},
}

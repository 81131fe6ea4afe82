"""VectorExp: float32 exp as TVM's fast_exp_float32 (vectorisable on CPUs)."""

import numpy as np
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_fusion_ext.tir_passes.vector_exp import VectorExp

EXP = tvm.ir.Op.get("tirx.exp")


@T.prim_func(s_tir=True)
def exp_f32_and_f64(a: T.Buffer((T.int64(4096),), "float32"), b: T.Buffer((T.int64(4096),), "float32"),
                    c: T.Buffer((T.int64(4),), "float64"), d: T.Buffer((T.int64(4),), "float64")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in T.vectorized(T.int64(4096)):
        with T.sblock("f32"):
            vi = T.axis.spatial(T.int64(4096), i)
            b[vi] = T.exp(a[vi])
    for j in range(T.int64(4)):
        with T.sblock("f64"):
            vj = T.axis.spatial(T.int64(4), j)
            d[vj] = T.exp(c[vj])


def _exp_calls(func):
    calls = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, lambda c: calls.append(str(c.ty.dtype))
                                         if c.op.same_as(EXP) else None)])
    return calls


def test_float32_exp_becomes_a_polynomial_and_float64_stays():
    before = tvm.IRModule({"main": exp_f32_and_f64})
    after = VectorExp()(before)
    assert _exp_calls(before["main"]) == ["float32", "float64"]
    assert _exp_calls(after["main"]) == ["float64"]


def test_polynomial_matches_exp_over_the_float32_range():
    lib = tvm.compile(VectorExp()(tvm.IRModule({"main": exp_f32_and_f64})), target="llvm")
    x = np.linspace(-87, 88, 4096).astype("float32")
    x[:3] = [-np.inf, -1000.0, -88.5]  # masked scores and underflow give 0, as exp does
    c = np.array([-1.5, -0.1, 0.3, 2.0])
    b, d = tvm.runtime.empty((4096,), "float32"), tvm.runtime.empty((4,), "float64")
    lib["main"](tvm.runtime.tensor(x), b, tvm.runtime.tensor(c), d)
    reference = np.exp(x.astype("float64"))
    got = b.numpy()
    assert np.all(got[:2] == 0.0) and got[2] < 1e-37
    relative = np.abs(got[3:] - reference[3:]) / reference[3:]
    assert relative.max() < 1e-6
    np.testing.assert_allclose(d.numpy(), np.exp(c), rtol=1e-12)


@T.prim_func(s_tir=True)
def sigmoid_f32(a: T.Buffer((T.int64(1024),), "float32"), b: T.Buffer((T.int64(1024),), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in T.vectorized(T.int64(1024)):
        with T.sblock("f32"):
            vi = T.axis.spatial(T.int64(1024), i)
            b[vi] = T.sigmoid(a[vi])


def test_sigmoid_is_built_on_the_polynomial_and_matches():
    after = VectorExp()(tvm.IRModule({"main": sigmoid_f32}))
    assert "sigmoid" not in after.script()
    lib = tvm.compile(after, target="llvm")
    x = np.linspace(-100, 100, 1024).astype("float32")
    b = tvm.runtime.empty((1024,), "float32")
    lib["main"](tvm.runtime.tensor(x), b)
    np.testing.assert_allclose(b.numpy(), 1 / (1 + np.exp(-x.astype("float64"))), rtol=1e-6, atol=1e-30)

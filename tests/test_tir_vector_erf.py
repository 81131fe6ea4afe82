"""VectorErf: float32 erf as TVM's fast_erf_float_expr polynomial (vectorisable on CPUs)."""

import math

import numpy as np
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_fusion_ext.tir_passes.vector_erf import VectorErf

ERF = tvm.ir.Op.get("tirx.erf")


@T.prim_func(s_tir=True)
def erf_f32_and_f64(a: T.Buffer((T.int64(4096),), "float32"), b: T.Buffer((T.int64(4096),), "float32"),
                    c: T.Buffer((T.int64(4),), "float64"), d: T.Buffer((T.int64(4),), "float64")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in T.vectorized(T.int64(4096)):
        with T.sblock("f32"):
            vi = T.axis.spatial(T.int64(4096), i)
            b[vi] = T.erf(a[vi] * T.float32(0.5))
    for j in range(T.int64(4)):
        with T.sblock("f64"):
            vj = T.axis.spatial(T.int64(4), j)
            d[vj] = T.erf(c[vj])


def _erf_calls(func):
    calls = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, lambda c: calls.append(str(c.ty.dtype))
                                         if c.op.same_as(ERF) else None)])
    return calls


def test_float32_erf_becomes_a_polynomial_and_float64_stays():
    before = tvm.IRModule({"main": erf_f32_and_f64})
    after = VectorErf()(before)
    assert _erf_calls(before["main"]) == ["float32", "float64"]
    assert _erf_calls(after["main"]) == ["float64"]
    assert _erf_calls(before["main"]) == ["float32", "float64"]  # the input module is unchanged


def test_polynomial_matches_erf_over_and_beyond_the_clamp():
    lib = tvm.compile(VectorErf()(tvm.IRModule({"main": erf_f32_and_f64})), target="llvm")
    x = np.linspace(-12, 12, 4096).astype("float32")  # erf(x / 2) over [-6, 6]
    c = np.array([-1.5, -0.1, 0.3, 2.0])
    b, d = tvm.runtime.empty((4096,), "float32"), tvm.runtime.empty((4,), "float64")
    lib["main"](tvm.runtime.tensor(x), b, tvm.runtime.tensor(c), d)
    reference = np.array([math.erf(v) for v in x.astype("float64") / 2])
    assert np.abs(b.numpy() - reference).max() < 1e-6
    np.testing.assert_allclose(d.numpy(), [math.erf(v) for v in c], rtol=1e-12)

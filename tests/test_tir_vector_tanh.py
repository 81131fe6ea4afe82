"""VectorTanh: float32 tanh as Eigen's rational polynomial (vectorisable on CPUs)."""

import numpy as np
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_fusion_ext.tir_passes.vector_tanh import VectorTanh

TANH = tvm.ir.Op.get("tirx.tanh")
N = 8192


@T.prim_func(s_tir=True)
def tanh_f32_and_f64(a: T.Buffer((T.int64(N),), "float32"), b: T.Buffer((T.int64(N),), "float32"),
                     c: T.Buffer((T.int64(4),), "float64"), d: T.Buffer((T.int64(4),), "float64")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in T.vectorized(T.int64(N)):
        with T.sblock("f32"):
            vi = T.axis.spatial(T.int64(N), i)
            b[vi] = T.tanh(a[vi])
    for j in range(T.int64(4)):
        with T.sblock("f64"):
            vj = T.axis.spatial(T.int64(4), j)
            d[vj] = T.tanh(c[vj])


def _tanh_calls(func):
    calls = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, lambda c: calls.append(str(c.ty.dtype))
                                         if c.op.same_as(TANH) else None)])
    return calls


def test_float32_tanh_becomes_a_polynomial_and_float64_stays():
    before = tvm.IRModule({"main": tanh_f32_and_f64})
    after = VectorTanh()(before)
    assert _tanh_calls(after["main"]) == ["float64"]
    assert _tanh_calls(before["main"]) == ["float32", "float64"]  # the input module is unchanged


def test_polynomial_matches_tanh_near_zero_and_beyond_the_clamp():
    lib = tvm.compile(VectorTanh()(tvm.IRModule({"main": tanh_f32_and_f64})), target="llvm")
    small = np.geomspace(1e-7, 1.0, N // 4)
    x = np.concatenate([np.linspace(-20, 20, N // 2), small, -small]).astype("float32")
    c = np.array([-1.5, -0.1, 0.3, 2.0])
    b, d = tvm.runtime.empty((N,), "float32"), tvm.runtime.empty((4,), "float64")
    lib["main"](tvm.runtime.tensor(x), b, tvm.runtime.tensor(c), d)
    reference = np.tanh(x.astype("float64"))
    relative = np.abs(b.numpy() - reference) / np.maximum(np.abs(reference), 1e-30)
    assert relative.max() < 1e-6  # relative: x itself near 0, not 1 - 2 / (1 + exp(2x))
    assert np.abs(b.numpy()).max() <= 1.0
    np.testing.assert_allclose(d.numpy(), np.tanh(c), rtol=1e-12)

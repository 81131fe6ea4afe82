"""Small hand-built Relax modules shared by the foundation tests (TVMScript must live in files)."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


@I.ir_module
class ConvBiasReluSoftmax:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
             b: R.Tensor((1, 4, 1, 1), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1)
            a = R.add(c, b)
            r = R.nn.relu(a)
            s = R.nn.softmax(r, axis=1)
            R.output(s)
        return s


@I.ir_module
class Diamond:
    @R.function
    def main(x: R.Tensor((4, 16), "float32")):
        with R.dataflow():
            e = R.exp(x)
            left = R.multiply(e, R.const(2.0, "float32"))
            right = R.nn.relu(e)
            j = R.add(left, right)
            R.output(j)
        return j


@I.ir_module
class SplitMultiOutput:
    @R.function
    def main(x: R.Tensor((4, 16), "float32")):
        with R.dataflow():
            r = R.nn.relu(x)
            parts = R.split(r, 2, axis=1)
            p0 = parts[0]
            p1 = parts[1]
            s = R.add(p0, p1)
            t = R.multiply(p0, R.const(3.0, "float32"))
            R.output(s, t)
        return (s, t)


@I.ir_module
class ConcatOfTuple:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.exp(x)
            b = R.nn.relu(y)
            c = R.concat((a, b), axis=1)
            d = R.sum(c, axis=1)
            R.output(d)
        return d


@I.ir_module
class WithConstants:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.add(x, R.const(np.arange(32, dtype="float32").reshape(4, 8)))
            b = R.multiply(a, R.const(np.full((8,), 0.5, dtype="float32")))
            c = R.nn.relu(b)
            R.output(c)
        return c


@I.ir_module
class SymbolicShape:
    @R.function
    def main(x: R.Tensor(("n", 8), "float32"), w: R.Tensor((8,), "float32")):
        n = T.int64()  # noqa: F841 (declares the symbolic dimension)
        with R.dataflow():
            a = R.add(x, w)
            b = R.exp(a)
            c = R.nn.relu(b)
            R.output(c)
        return c


@I.ir_module
class WithPackedCall:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.exp(x)
            p = R.call_dps_packed("my_packed_fn", (a,), out_ty=R.Tensor((4, 8), "float32"))
            b = R.nn.relu(p)
            c = R.add(b, a)
            R.output(c)
        return c


@I.ir_module
class MatmulChain:
    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32"),
             v: R.Tensor((32,), "float32")):
        with R.dataflow():
            m = R.matmul(x, w)
            a = R.add(m, v)
            g = R.nn.gelu(a)
            t = R.permute_dims(g, [1, 0])
            s = R.sum(t, axis=1)
            R.output(s)
        return s


@I.ir_module
class WithInplaceCall:
    @T.prim_func(private=True, s_tir=True)
    def add_inplace(A: T.Buffer((T.int64(4), T.int64(8)), "float32"),
                    B: T.Buffer((T.int64(4), T.int64(8)), "float32")):
        for i, j in T.grid(T.int64(4), T.int64(8)):
            with T.sblock("add"):
                vi, vj = T.axis.remap("SS", [i, j])
                A[vi, vj] = A[vi, vj] + B[vi, vj]

    @R.function
    def main(x: R.Tensor((4, 8), "float32"), y: R.Tensor((4, 8), "float32")):
        cls = WithInplaceCall
        with R.dataflow():
            e = R.exp(x)
            s = R.call_tir_inplace(cls.add_inplace, (e, y), inplace_indices=[0],
                                   out_ty=R.Tensor((4, 8), "float32"))
            r = R.nn.relu(s)
            R.output(r)
        return r


@I.ir_module
class TwoChains:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.exp(x)
            d = R.nn.relu(x)
            c = R.add(a, R.const(1.0, "float32"))
            b = R.multiply(d, R.const(2.0, "float32"))
            R.output(c, b)
        return (c, b)


@I.ir_module
class TwoMatmuls:  # NeoFlow parallel fusion: two matmuls sharing their input
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8, 16), "float32"),
             w2: R.Tensor((8, 6), "float32")):
        with R.dataflow():
            a = R.matmul(x, w1)
            b = R.matmul(x, w2)
            c = R.nn.relu(a)
            d = R.sigmoid(b)
            R.output(c, d)
        return (c, d)


@I.ir_module
class SixKernels:  # a six-kernel graph written in BFS order (MindSpore execution-order scheduling)
    @R.function
    def main(x: R.Tensor((64, 64), "float32")):
        with R.dataflow():
            k1 = R.exp(x)
            k2 = R.sigmoid(x)
            k4 = R.tanh(x)
            k5 = R.nn.relu(x)
            k3 = R.add(k1, k2)
            t = R.add(k3, k4)
            k6 = R.add(t, k5)
            R.output(k6)
        return k6

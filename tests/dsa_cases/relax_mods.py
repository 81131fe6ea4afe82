"""Small Relax modules compiled for dsa/* in test_dsa_codegen.py."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class MatmulBias:
    @R.function
    def main(x: R.Tensor((128, 256), "float32"), w: R.Tensor((256, 512), "float32"),
             b: R.Tensor((512,), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.add(y, b)
            R.output(z)
        return z


@I.ir_module
class ConvSoftmax:
    @R.function
    def main(x: R.Tensor((1, 16, 16, 16), "float32"), w: R.Tensor((32, 16, 3, 3), "float32"),
             b: R.Tensor((1, 32, 1, 1), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1)
            d = R.add(c, b)
            e = R.nn.relu(d)
            f = R.reshape(e, (1, 32 * 256))
            g = R.nn.softmax(f, axis=1)
            R.output(g)
        return g

"""``ir_utils``: one meaning of "primitive function" for every pass, and the variable remapper."""

import pytest
import tvm
import tvm_ffi
from cases.foundation import SixKernels, TwoMatmuls
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.explain.inline import is_group_function
from tvm_fusion_ext.ir_utils import VarRemapper, is_external, is_primitive
from tvm_fusion_ext.relax_passes.apollo_fusion import ApolloFusion
from tvm_fusion_ext.relax_passes.materialize_partition import MaterializePartition, group_by_names
from tvm_fusion_ext.relax_passes.open_compound_ops import OpenCompoundOps
from tvm_fusion_ext.relax_passes.parallel_fusion import ParallelFusion
from tvm_fusion_ext.relax_passes.schedule_execution_order import ScheduleExecutionOrder
from tvm_fusion_ext.relax_passes.simplify import AlgebraicSimplify


@I.ir_module
class AddZero:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            a = R.add(x, R.const(0.0, "float32"))
            b = R.nn.relu(a)
            R.output(b)
        return b






@I.ir_module
class LayerNorm:
    @R.function
    def main(x: R.Tensor((8, 64), "float32"), g: R.Tensor((64,), "float32"),
             b: R.Tensor((64,), "float32")):
        with R.dataflow():
            a = R.nn.layer_norm(x, g, b, axes=[-1])
            c = R.nn.relu(a)
            R.output(c)
        return c


def _legal(mod):
    return relax.transform.LegalizeOps()(mod)


def _annotated(mod):
    return relax.transform.AnnotateTIROpPattern()(_legal(mod))


# (pass, module): each pass rewrites the module's main function when it is not primitive
CASES = {
    "AlgebraicSimplify": (AlgebraicSimplify, lambda: AddZero),
    "ParallelFusion": (ParallelFusion, lambda: TwoMatmuls),
    "ScheduleExecutionOrder": (ScheduleExecutionOrder, lambda: _legal(SixKernels)),
    "OpenCompoundOps": (OpenCompoundOps, lambda: _legal(LayerNorm)),
    "MaterializePartition": (lambda: MaterializePartition(group_by_names(["k1", "k2", "k3"])),
                             lambda: _legal(SixKernels)),
    "ApolloFusion": (lambda: ApolloFusion(check_downstream=False), lambda: _annotated(SixKernels)),
}


def _with_main_attr(mod: tvm.IRModule, value) -> tvm.IRModule:
    out = mod.clone()
    out["main"] = mod["main"].with_attr("Primitive", value)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_a_primitive_0_function_is_not_primitive_to_any_pass(name):
    make_pass, make_mod = CASES[name]
    mod = make_mod()
    rewritten = make_pass()(mod)
    assert not tvm_ffi.structural_equal(rewritten["main"].body, mod["main"].body)  # not vacuous
    zero = make_pass()(_with_main_attr(mod, 0))
    tvm.ir.assert_structural_equal(zero, _with_main_attr(rewritten, 0))
    primitive = _with_main_attr(mod, 1)
    tvm.ir.assert_structural_equal(make_pass()(primitive)["main"], primitive["main"])


def test_is_primitive_reads_the_attribute_as_tvm_does():
    main = AddZero["main"]
    assert not is_primitive(main) and not is_group_function(main)
    for value, expected in ((0, False), (False, False), (1, True), (True, True)):
        func = main.with_attr("Primitive", value)
        assert is_primitive(func) == expected and is_group_function(func) == expected
    assert is_external(main.with_attr("Codegen", "ccl")) and not is_external(main)


def test_var_remapper_replaces_uses_only():
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    y = relax.Var("y", relax.TensorType((4,), "float32"))
    z = relax.Var("z", relax.TensorType((4,), "float32"))
    remapped = VarRemapper({x: y}).visit_expr(relax.op.add(x, z))
    assert remapped.args[0].same_as(y) and remapped.args[1].same_as(z)

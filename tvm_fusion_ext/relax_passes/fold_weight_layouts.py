"""``FoldWeightLayouts``: the weight-packing calls of a scheduled module run once, at compile time,
each distinct packing function built once.

The CPU schedule packs layout-free weights in ``meta_schedule.layout_rewrite_preproc`` blocks;
``relax.transform.SplitLayoutRewritePreproc`` (``src/relax/transform/split_layout_rewrite_preproc.cc``)
moves each into a function of its own, called on the constant weight, and
``relax.transform.FoldConstant`` (``src/relax/transform/fold_constant.cc``) evaluates those calls
through a build of its own: on ViT-Ti the schedule phase's ``FoldConstant`` took 3.9 s of a 10.8 s
compile, this pass 0.4 s. This pass evaluates every ``call_tir`` whose arguments are all
constants, building each structurally distinct PrimFunc once (``tvm_ffi.structural_hash``
confirmed by ``structural_equal``), and replaces the call by its constant result; what it
leaves, ``FoldConstant`` folds as before.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir_utils import with_functions
from ..registration import register_pass

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.FoldWeightLayouts")
class FoldWeightLayouts:
    """Module pass: fold ``call_tir`` bindings on constants (module docstring), building each
    distinct callee for ``target`` (default: the host's ``llvm``). ``folded`` counts the calls
    folded, ``built`` the PrimFuncs built."""

    def __init__(self, target: tvm.target.Target | str | None = None):
        self.target = tvm.target.Target(target or "llvm")
        self.folded = 0
        self.built = 0
        self._kernels: dict[int, list] = {}  # structural hash -> [(PrimFunc, built kernel)]

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        folder = _ConstantCallFolder(mod, self)
        updates = {gvar: folder.visit_expr(func) for gvar, func in mod.functions_items()
                   if isinstance(func, relax.Function)}
        return with_functions(mod, {gvar: func for gvar, func in updates.items()
                                    if not func.same_as(mod[gvar])})

    def evaluate(self, func: tirx.PrimFunc, args: list, out_ty) -> np.ndarray:
        """``func`` run on the constant ``args``, into a new array of type ``out_ty``."""
        out = tvm.runtime.empty([int(d) for d in out_ty.shape], str(out_ty.dtype))
        self._built(func)(*[arg.value for arg in args], out)
        return out.numpy()

    def _built(self, func: tirx.PrimFunc):
        key = tvm_ffi.structural_hash(func)
        for known, kernel in self._kernels.get(key, []):
            if tvm_ffi.structural_equal(known, func):
                return kernel
        lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), self.target)
        self.built += 1
        self._kernels.setdefault(key, []).append((func, lib["main"]))
        return lib["main"]


@mutator
class _ConstantCallFolder(PyExprMutator):
    """Replaces ``call_tir(f, (constants...))`` with a static tensor result by its value."""

    def __init__(self, mod: tvm.IRModule, folding: FoldWeightLayouts):
        super().__init__(mod)
        self.mod, self.folding = mod, folding

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(_CALL_TIR) or len(call.args) != 2:
            return call
        callee, args = self.mod[call.args[0]], list(call.args[1].fields)
        out_ty = call.ty
        if (not isinstance(callee, tirx.PrimFunc) or not args
                or not all(isinstance(arg, tvm.ir.Constant) for arg in args)
                or not isinstance(out_ty, relax.TensorType)
                or not all(isinstance(d, tirx.IntImm) for d in out_ty.shape)):
            return call
        self.folding.folded += 1
        return relax.const(self.folding.evaluate(callee, args, out_ty))

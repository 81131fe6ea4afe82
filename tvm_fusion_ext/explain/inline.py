"""Undo the grouping of a fused module (after a strategy's fusion passes, before ``FuseTIR``).

Every strategy of the registry ends in the same form: each group of bindings is a private
``{"Primitive": True}`` Relax function called once per kernel from the caller (what ``FuseOps``
and :class:`~tvm_fusion_ext.relax_passes.materialize_partition.MaterializePartition` both produce,
and what ``FuseTIR`` turns into one PrimFunc per call). :func:`inline_groups` puts the bindings of
every such call back into the caller, in the caller's order, and remembers which call each inlined
binding came from. The graph view (:func:`~tvm_fusion_ext.analysis.graph.build_graphs`) of the
result is then the graph the strategy partitioned, with the partition known exactly, whatever
algorithm (Python or TVM's C++ ``FuseOps``) made it.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir_utils import is_primitive


@dataclass
class InlinedCall:
    """One call of a grouped function: its name and the caller vars of its inlined bindings."""

    function: str
    variables: list


def is_group_function(func) -> bool:
    """A grouped function as ``FuseOps`` / ``MaterializePartition`` make them (``Primitive``)."""
    return isinstance(func, relax.Function) and is_primitive(func)


def inline_groups(mod: tvm.IRModule, func_name: str = "main") -> tuple[tvm.IRModule, list[InlinedCall]]:
    """``mod`` with every call of a grouped function in ``func_name`` replaced by its bindings.

    Returns the module (grouped functions dropped) and one :class:`InlinedCall` per call, in the
    caller's order. Results of a multi-output group are bound directly to the variables the
    caller's tuple-get-items defined, so no tuple binding is left where there was none before
    fusion; a non-leaf argument (an item of a partially used tuple) is bound before the call.
    """
    inliner = _Inliner(mod)
    new_func = inliner.visit_expr(mod[func_name])
    inliner.builder_.update_func(mod.get_global_var(func_name), new_func)
    result = inliner.builder_.get()
    for gvar, func in list(result.functions_items()):
        if is_group_function(func):
            result = _without(result, gvar)
    return result, inliner.calls


def _without(mod: tvm.IRModule, gvar) -> tvm.IRModule:
    functions = {g: f for g, f in mod.functions_items() if not g.same_as(gvar)}
    return tvm.IRModule(functions, attrs=mod.attrs)


@mutator
class _Inliner(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod
        self.calls: list[InlinedCall] = []
        self._item_uses: dict = {}  # call var -> {index: tuple-get-item var}
        self._whole_uses: set = set()  # call vars used other than through a tuple-get-item
        self._results: dict = {}  # multi-output call var -> inlined result vars

    def visit_dataflow_block_(self, block):
        self._scan_uses(block)
        return super().visit_dataflow_block_(block)

    def _scan_uses(self, block) -> None:
        grouped = {b.var for b in block.bindings if self._callee(b.value) is not None}
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in grouped:
                self._item_uses.setdefault(value.tuple_value, {})[value.index] = binding.var
                continue
            relax.analysis.post_order_visit(
                value, lambda e: self._whole_uses.add(e) if e in grouped else None)
        self._whole_uses |= {b.var for b in block.bindings
                             if b.var in grouped and not isinstance(b.var, relax.DataflowVar)}

    def _callee(self, value):
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
            func = self.mod[value.op]
            if is_group_function(func):
                return func
        return None

    def visit_var_binding_(self, binding):
        value = binding.value
        func = self._callee(value)
        if func is not None:
            self._inline(binding.var, value, func)
            return
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in self._results:
            self.set_var_remap(binding.var, self._results[value.tuple_value][value.index])
            return
        super().visit_var_binding_(binding)

    def _inline(self, call_var, call: relax.Call, func: relax.Function) -> None:
        args = []
        for arg in call.args:
            arg = self.visit_expr(arg)
            if isinstance(arg, relax.TupleGetItem):
                arg = self.builder_.emit(arg)
            args.append(arg)
        func = relax.utils.copy_with_new_vars(func)
        func = func.bind_params(dict(zip(func.params, args)))
        body = func.body
        results = list(body.body.fields) if isinstance(body.body, relax.Tuple) else [body.body]
        single = not isinstance(body.body, relax.Tuple)
        items = self._item_uses.get(call_var, {})
        exported = {}  # result var -> the caller var it stands for
        for i, result in enumerate(results):
            exported[result] = call_var if single else items.get(i)
        emitted = []
        for block in body.blocks:
            for inner in block.bindings:
                outer = exported.get(inner.var)
                new_value = self.visit_expr(inner.value)
                if outer is not None and not isinstance(outer, relax.DataflowVar):
                    new_var = self.builder_.emit_output(new_value, name_hint=outer.name)
                else:
                    name = outer.name if outer is not None else inner.var.name
                    new_var = self.builder_.emit(new_value, name_hint=name)
                self.set_var_remap(inner.var, new_var)
                emitted.append(new_var)
        inlined = [self.visit_expr(r) for r in results]
        if single:
            self.set_var_remap(call_var, inlined[0])
        else:
            self._results[call_var] = inlined
            if call_var in self._whole_uses:
                local = isinstance(call_var, relax.DataflowVar)
                emit = self.builder_.emit if local else self.builder_.emit_output
                self.set_var_remap(call_var, emit(relax.Tuple(inlined), name_hint=call_var.name))
        self.calls.append(InlinedCall(call.op.name_hint, emitted))

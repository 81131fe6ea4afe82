"""Small IRModule helpers shared by the module passes."""

from __future__ import annotations

import threading
from collections import OrderedDict

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.dpl import rewrite_call
from tvm.relax.expr_functor import PyExprMutator, mutator

PRIMITIVE_ATTR = "Primitive"
CODEGEN_ATTR = "Codegen"
SCHEDULED_ATTR = "tirx.is_scheduled"


def with_functions(mod: tvm.IRModule, updates: dict) -> tvm.IRModule:
    """A copy of ``mod`` with ``updates`` (GlobalVar -> function) applied, or ``mod`` itself when
    there are none: a pass never modifies its caller's module in place."""
    if not updates:
        return mod
    mod = mod.clone()
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def rewrite_calls(mod: tvm.IRModule, pattern, rewrite) -> tvm.IRModule:
    """``mod`` with ``tvm.relax.dpl.rewrite_call(pattern, rewrite, func)`` applied to every Relax
    function (:func:`with_functions`: unchanged functions are kept, the caller's module too)."""
    updates = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewritten = rewrite_call(pattern, rewrite, func)
            if not rewritten.same_as(func):
                updates[gvar] = rewritten
    return with_functions(mod, updates)


def is_primitive(func: tvm.ir.BaseFunc) -> bool:
    """Whether ``func`` is a grouped (primitive) function: its ``Primitive`` attribute is present
    and nonzero, as TVM reads ``relax::attr::kPrimitive`` (``HasNonzeroAttr`` in
    ``src/relax/transform/fuse_tir.cc``). A function with ``Primitive=0`` is not primitive."""
    return bool((func.attrs or {}).get(PRIMITIVE_ATTR, 0))


def non_primitive_functions(mod: tvm.IRModule) -> list[tuple[tvm.ir.GlobalVar, relax.Function]]:
    """``(GlobalVar, function)`` of every Relax function of ``mod`` that is not primitive: the ones
    a graph-level pass rewrites."""
    return [(gvar, func) for gvar, func in mod.functions_items()
            if isinstance(func, relax.Function) and not is_primitive(func)]


def is_external(func: tvm.ir.BaseFunc) -> bool:
    """Whether ``func`` is offloaded to an external code generator (it has a ``Codegen`` attribute)."""
    return CODEGEN_ATTR in (func.attrs or {})


def is_scheduled(func: tvm.ir.BaseFunc) -> bool:
    """Whether a schedule already ran on PrimFunc ``func`` (attribute ``tirx.is_scheduled``)."""
    return bool((func.attrs or {}).get(SCHEDULED_ATTR, False))


@mutator
class VarRemapper(PyExprMutator):
    """Replace every use of a variable (or constant) that is a key of ``var_map`` by its value."""

    def __init__(self, var_map: dict):
        super().__init__()
        self.var_map = var_map

    def visit_var_(self, var):
        return self.var_map.get(var, var)

    def visit_dataflow_var_(self, var):
        return self.var_map.get(var, var)

    def visit_generic_const_(self, const):
        return self.var_map.get(const, const)


def map_prim_func_calls(mod: tvm.IRModule, rewrite) -> tvm.IRModule:
    """``mod`` with every ``tvm.ir.Call`` in its PrimFuncs replaced by ``rewrite(call)`` (which
    returns the call itself to keep it); functions nothing changed in are kept as they are."""
    updates = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            rewritten = tvm_ffi.structural_map(func, [(tvm.ir.Call, rewrite)])
            if not rewritten.same_as(func):
                updates[gvar] = rewritten
    return with_functions(mod, updates)


def map_float32_calls(mod: tvm.IRModule, replacements) -> tvm.IRModule:
    """``mod`` with every float32 call of an op of ``replacements`` (``(op, expression of the
    call's first argument)`` pairs) in its PrimFuncs replaced by that expression."""

    def rewrite(call):
        if str(call.ty.dtype) != "float32":
            return call
        return next((replace(call.args[0]) for op, replace in replacements if call.op.same_as(op)), call)

    return map_prim_func_calls(mod, rewrite)


class StructuralMemo:
    """Values remembered per IR structure, the ``size`` most recently used kept: a key is the
    object's ``tvm_ffi.structural_hash`` with ``extra`` (a target, a rule), confirmed by
    ``structural_equal`` (structurally equal functions compute the same, only names differ).
    Thread-safe (NeoFlow's dynamic runtime compiles from a background thread too)."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()  # key -> (object, value)
        self._lock = threading.Lock()

    def get(self, obj, compute, extra=()):
        """The value remembered for ``obj`` (and ``extra``), else ``compute()`` remembered."""
        key = (tvm_ffi.structural_hash(obj), extra)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and tvm_ffi.structural_equal(hit[0], obj):
                self._entries.move_to_end(key)
                return hit[1]
        value = compute()
        with self._lock:
            self._entries[key] = (obj, value)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

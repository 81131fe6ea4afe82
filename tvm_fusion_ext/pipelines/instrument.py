"""Invariants checked after every pass of a pipeline when a debug flag is on.

:class:`CheckInvariants` is a ``tvm.ir.instrument.PassInstrument``; it sees every pass, nested ones
included, and raises :class:`InvariantError` naming the pass that broke:

* after every pass: ``relax.analysis.check_well_formed`` (except the passes TVM's own
  ``WellFormedInstrument`` skips);
* after every grouping pass (``FuseOps``, ``MaterializePartition``): no binding lost or duplicated
  (the kernels and ops called per inference, counted through the ``Primitive`` functions, equal
  those before the pass) and no cycle between groups (every group call uses only values bound
  before it);
* after ``FuseTIR``: every group became one PrimFunc (no ``Primitive`` Relax function is called any
  more) and every PrimFunc passes TIR's ``verify_well_formed``; the final build then compiles each
  of them.

:func:`.phases.pipeline` runs its passes through :func:`run_checked`, which installs the instrument
when the environment variable ``TVM_FUSION_EXT_CHECK`` is ``1`` (or inside
:func:`checking_invariants`). The checks run in a nested ``PassContext`` that keeps the current
opt level, config and required/disabled passes but carries only this instrument.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

ENV_VAR = "TVM_FUSION_EXT_CHECK"
# Passes that may leave a module transiently ill-formed (as in TVM's WellFormedInstrument).
SKIP_WELL_FORMED = ("Normalize", "NormalizeGlobalVar", "ResolveGlobals")
GROUPING_PASSES = ("FuseOps", "tvm_fusion_ext.MaterializePartition")
_CALL_TIR_OPS = ("relax.call_tir", "relax.call_tir_inplace")
_forced = 0


@tvm_ffi.register_error("tvm_fusion_ext.InvariantError")
class InvariantError(RuntimeError):
    """A pass broke an invariant; registered with the FFI so it keeps its type through passes."""


def enabled() -> bool:
    return _forced > 0 or os.environ.get(ENV_VAR, "") not in ("", "0")


@contextlib.contextmanager
def checking_invariants():
    """Enable the checks in this block, whatever ``TVM_FUSION_EXT_CHECK`` says."""
    global _forced
    _forced += 1
    try:
        yield
    finally:
        _forced -= 1


def run_checked(passes: tvm.transform.Pass, mod: tvm.IRModule) -> tvm.IRModule:
    """``passes(mod)``, under :class:`CheckInvariants` when checks are enabled."""
    if not enabled():
        return passes(mod)
    ctx = tvm.transform.PassContext.current()
    if any(isinstance(i, CheckInvariants) for i in ctx.instruments):
        return passes(mod)
    with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                   disabled_pass=list(ctx.disabled_pass), config=dict(ctx.config),
                                   instruments=[CheckInvariants()]):
        return passes(mod)


@tvm.ir.instrument.pass_instrument
class CheckInvariants:
    """The checks of the module docstring; ``self.checked`` counts passes checked by name."""

    def __init__(self):
        self.before: list[Counter] = []  # a stack: grouping passes may nest
        self.checked: Counter = Counter()

    def run_before_pass(self, mod, info):
        if info.name in GROUPING_PASSES:
            self.before.append(calls_per_inference(mod))

    def run_after_pass(self, mod, info):
        name = info.name
        self.checked[name] += 1
        if name not in SKIP_WELL_FORMED and not relax.analysis.check_well_formed(mod):
            raise InvariantError(f"the module is not well-formed after pass {name}")
        if name in GROUPING_PASSES:
            _check_same_calls(self.before.pop(), calls_per_inference(mod), name)
            _check_groups_acyclic(mod, name)
        if name == "FuseTIR":
            _check_groups_lowered(mod)


def _relax_functions(mod: tvm.IRModule):
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function) and not (func.attrs and func.attrs.get("Primitive", 0)):
            yield gvar, func


def _primitive(mod: tvm.IRModule, op) -> relax.Function | None:
    if isinstance(op, tvm.ir.GlobalVar) and op in mod:
        func = mod[op]
        if isinstance(func, relax.Function) and func.attrs and func.attrs.get("Primitive", 0):
            return func
    return None


def calls_per_inference(mod: tvm.IRModule) -> Counter:
    """Kernels (``call_tir`` callee names) and other ops called by the module's entry functions,
    looking through calls of ``Primitive`` functions: what a regrouping must preserve. Unused
    bindings are not counted (``FuseOps`` drops dead groups)."""
    counts: Counter = Counter()

    def visit(expr):
        if not isinstance(expr, relax.Call):
            return
        if isinstance(expr.op, tvm.ir.Op):
            if expr.op.name in _CALL_TIR_OPS:
                counts[f"call_tir {expr.args[0].name_hint}"] += 1
            else:
                counts[expr.op.name] += 1
        elif (callee := _primitive(mod, expr.op)) is not None:
            relax.analysis.post_order_visit(relax.analysis.remove_all_unused(callee).body, visit)

    for _, func in _relax_functions(mod):  # dead bindings do not count: FuseOps drops them
        relax.analysis.post_order_visit(relax.analysis.remove_all_unused(func).body, visit)
    return counts


def _check_same_calls(before: Counter, after: Counter, pass_name: str) -> None:
    if before == after:
        return
    lost = before - after
    extra = after - before
    raise InvariantError(f"pass {pass_name} changed the ops executed per inference: "
                         f"lost {dict(lost)}, duplicated or added {dict(extra)}")


def _check_groups_acyclic(mod: tvm.IRModule, pass_name: str) -> None:
    """Every binding (group calls included) uses only values bound before it in its function."""
    for gvar, func in _relax_functions(mod):
        if not isinstance(func.body, relax.SeqExpr):
            continue
        bound_later = {b.var for block in func.body.blocks for b in block.bindings}
        for block in func.body.blocks:
            for binding in block.bindings:
                early = [v.name for v in relax.analysis.free_vars(binding.value) if v in bound_later]
                if early:
                    raise InvariantError(
                        f"after pass {pass_name}, {gvar.name_hint}: binding {binding.var.name} uses "
                        f"{early} before they are bound (a cycle between groups)")
                bound_later.discard(binding.var)


def _check_groups_lowered(mod: tvm.IRModule) -> None:
    for gvar, func in _relax_functions(mod):
        def visit(expr, owner=gvar):
            if isinstance(expr, relax.Call) and _primitive(mod, expr.op) is not None:
                raise InvariantError(f"after FuseTIR, {owner.name_hint} still calls group "
                                     f"{expr.op.name_hint}: it was not turned into one PrimFunc")

        relax.analysis.post_order_visit(func.body, visit)
    for gvar, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        verifier = s_tir.analysis if func.attrs and func.attrs.get("s_tir", False) else tirx.analysis
        if not verifier.verify_well_formed(func, assert_mode=False):
            raise InvariantError(f"after FuseTIR, PrimFunc {gvar.name_hint} is not well-formed")

"""Default CPU schedule for every PrimFunc under the ``untuned`` policy.

Structured like ``tvm.s_tir.dlight``: an ordered list of :class:`~tvm.s_tir.dlight.ScheduleRule`
objects, each returning a schedule or ``None`` to decline, tried per PrimFunc until one applies:

1. :class:`.cpu_attention.CPUAttention` - a kernel that is exactly attention as one cache-blocked
   loop nest (FlashAttention's tiling, APOLLO section 4.2's stitching; CPU targets only);
2. :class:`.contraction_chain.ContractionChain` - two chained contractions as one loop nest
   (GraphTurbo section 4.1 along a chain);
3. :class:`.loop_fusion.AnchorLoopFusion` - GraphTurbo section 4.1 anchor tiling and loop fusion;
4. :class:`.plain_schedule.PlainSchedule` - parallel outer / vectorised inner loops per block.

A rule that raises is treated as declining, so the pass never fails a compile: the function then
goes to the next rule, or stays as it was. PrimFuncs that already carry ``tirx.is_scheduled``
(e.g. from a MetaSchedule database) are left alone; scheduled ones get the attribute.
``DefaultSchedule.stats`` counts the functions each rule scheduled (and ``"unscheduled"``);
``DefaultSchedule.remarks`` keeps, per function, why rules declined it and what the rule that
scheduled it left undone (:class:`.rule_base.SpecScheduleRule`'s ``reason`` and ``notes``), and
:func:`schedule_remarks` gives the same for one function.

The default rules' result is remembered per structure (``tvm_ffi.structural_hash`` confirmed by
``structural_equal``, target and spec): a model's repeated layers are scheduled once, and a kernel
the profitability check of :mod:`tvm_fusion_ext.cost` already scheduled (through
:func:`untuned_schedule`) is not scheduled again by the pipeline. Structurally equal PrimFuncs
compute the same function, so one's schedule is the other's (only names differ).
"""

from __future__ import annotations

import logging
from collections import Counter

import tvm
from tvm import tirx

from ..hardware import CPUSpec, HardwareSpec, spec_for_target
from ..ir_utils import SCHEDULED_ATTR, StructuralMemo, is_scheduled, with_functions
from ..registration import register_pass
from .contraction_chain import ContractionChain
from .cpu_attention import CPUAttention
from .loop_fusion import AnchorLoopFusion
from .plain_schedule import PlainSchedule
from .unchecked import unchecked_primitives

UNSCHEDULED = "unscheduled"
MEMO_SIZE = 1024  # default-rule results remembered (least recently used dropped first)
_LOG = logging.getLogger(__name__)
_MEMO = StructuralMemo(MEMO_SIZE)  # function, target, spec -> (schedule or None, rule, remarks)


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.DefaultSchedule")
class DefaultSchedule:
    """Module pass: apply the first applicable rule to every unscheduled PrimFunc.

    ``target`` defaults to the function's ``target`` attribute, then ``Target.current()``, then
    ``llvm``; ``spec`` defaults to :func:`~tvm_fusion_ext.hardware.spec_for_target` of it.
    ``rules`` replaces the default rule list (:func:`default_rules`).
    """

    def __init__(self, target: tvm.target.Target | str | None = None,
                 spec: HardwareSpec | None = None, rules: list | None = None):
        self.target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
        self.spec = spec
        self.rules = rules
        self.stats: Counter = Counter()
        self.remarks: dict[str, list[str]] = {}

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or is_scheduled(func):
                continue
            target = self._target_of(func)
            spec = self.spec or spec_for_target(target)
            if self.rules is None:
                sch, rule_name, remarks = _default_applicable(func, target, spec)
            else:
                sch, rule_name, remarks = _first_applicable(func, target, self.rules)
            self.stats[rule_name] += 1
            if remarks:
                self.remarks[gvar.name_hint] = remarks
                _LOG.debug("%s (%s): %s", gvar.name_hint, rule_name, "; ".join(remarks))
            if sch is not None:
                updates[gvar] = sch.mod["main"].with_attr(SCHEDULED_ATTR, True)
        return with_functions(mod, updates)

    def _target_of(self, func: tirx.PrimFunc) -> tvm.target.Target:
        attr = func.attrs.get("target") if func.attrs is not None else None
        return attr or self.target or tvm.target.Target.current(allow_none=True) or \
            tvm.target.Target("llvm")


def default_schedule_pass(target: tvm.target.Target | None = None,
                          spec: HardwareSpec | None = None) -> tvm.transform.Pass:
    """The ``untuned`` policy's scheduling pass (kept as the entry point of ``pipelines.py``)."""
    return DefaultSchedule(target, spec)


def default_rules(spec: HardwareSpec) -> list:
    """The default rule list, in the order they are tried (CPUAttention for a CPU's spec only)."""
    attention = [CPUAttention(spec)] if isinstance(spec, CPUSpec) else []
    return [*attention, ContractionChain(spec), AnchorLoopFusion(spec), PlainSchedule(spec)]


def untuned_schedule(func: tirx.PrimFunc, target: tvm.target.Target):
    """The ``s_tir.Schedule`` :class:`DefaultSchedule` gives ``func`` (``None`` when every rule
    declines); MetaSchedule tuning measures its trace as the first record of a kernel, and the
    cost model of :mod:`tvm_fusion_ext.cost` predicts its time. The schedule may be shared with a
    structurally equal function: read it, never apply primitives to it."""
    return _default_applicable(func, target, spec_for_target(target))[0]


def schedule_remarks(func: tirx.PrimFunc, target: tvm.target.Target) -> list[str]:
    """``"Rule: why"`` for each default rule that declined ``func`` before one scheduled it (a rule
    that passed over a kernel outside its kind, :meth:`.rule_base.SpecScheduleRule.pass_over`,
    leaves none), and
    ``"Rule: what"`` for what the scheduling rule left undone (a contraction kept as a plain
    loop nest); empty for a kernel the first rule schedules whole."""
    return _default_applicable(func, target, spec_for_target(target))[2]


def _default_applicable(func: tirx.PrimFunc, target, spec: HardwareSpec):
    """:func:`_first_applicable` over :func:`default_rules`, remembered (module docstring)."""
    return _MEMO.get(func, lambda: _first_applicable(func, target, default_rules(spec)), (str(target), spec))


def _first_applicable(func: tirx.PrimFunc, target, rules):
    """``(schedule, rule name, remarks)`` of the first rule that applies, or ``(None,
    UNSCHEDULED, remarks)``; remarks as :func:`schedule_remarks` gives them."""
    remarks = []
    for rule in rules:
        name = type(rule).__name__
        try:
            with unchecked_primitives():
                sch = rule.apply(func, target, False)
        except Exception as err:  # noqa: BLE001 - any failure means "decline"; never fail a compile
            _LOG.debug("rule %s declined after an error", name, exc_info=True)
            remarks.append(f"{name}: raised {type(err).__name__}")
            continue
        if sch is not None:
            return sch, name, remarks + [f"{name}: {note}" for note in getattr(rule, "notes", [])]
        if getattr(rule, "applicable", True):
            remarks.append(f"{name}: {getattr(rule, 'reason', None) or 'declined'}")
    return None, UNSCHEDULED, remarks

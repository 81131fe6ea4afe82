"""The common shape of the package's dlight-style TIR schedule rules."""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl

from ..hardware import HardwareSpec, spec_for_target
from .analysis import analyze_blocks
from .vectorize import peel_vector_tails


class SpecScheduleRule(dl.ScheduleRule):
    """A rule configured by a hardware spec (the target's own unless one is given).

    ``apply`` declines (returns None) for anything that is not a PrimFunc with analysable blocks;
    otherwise it hands the schedule, the analysed blocks and the spec to :meth:`schedule`, which
    returns the schedule or None to decline; the loops it vectorised with a predicated tail are then
    peeled (:func:`.vectorize.peel_vector_tails`). A rule that sets ``skip_loopless`` is given the other
    blocks when some have no loops (see :func:`.analysis.analyze_blocks`) instead of declining.

    After ``apply``, ``reason`` says why the rule declined (``None`` when it scheduled or passed
    over a function outside its kind, see :meth:`pass_over`; ``applicable`` is then false), and
    ``notes`` what a schedule it made leaves undone (a block kept as a plain loop nest): what the
    profitability check of :mod:`tvm_fusion_ext.cost` and ``explain`` can read instead of a
    silently slow kernel.
    """

    skip_loopless = False

    def __init__(self, spec: HardwareSpec | None = None):
        self.spec = spec
        self.reason: str | None = None
        self.notes: list[str] = []
        self.applicable = True

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        self.reason, self.notes, self.applicable = None, [], True
        if not isinstance(func, tirx.PrimFunc):
            return self.decline_unanalysable("not a PrimFunc")
        sch = s_tir.Schedule(func)
        analyzed = analyze_blocks(sch, skip_loopless=self.skip_loopless)
        if not analyzed:
            return self.decline_unanalysable("a block is nested, predicated, writes several buffers or "
                                             "binds its loops other than one loop per block variable")
        scheduled = self.schedule(sch, analyzed, self.spec or spec_for_target(target))
        if scheduled is not None:
            peel_vector_tails(scheduled)
        return scheduled

    def decline(self, reason: str) -> None:
        """Record why the rule declines the function at hand; ``return self.decline(...)``."""
        self.reason = reason

    def decline_unanalysable(self, reason: str) -> None:
        """Decline a function :func:`.analysis.analyze_blocks` rejects; a rule for one narrow kind
        of function passes over it instead, and leaves the reason to the rules after it."""
        return self.decline(reason)

    def pass_over(self) -> None:
        """Decline a function that is not of the rule's kind (a chain rule given one contraction):
        nothing worth a remark; ``return self.pass_over()``."""
        self.applicable = False

    def schedule(self, sch: s_tir.Schedule, analyzed: list, spec: HardwareSpec):
        """Schedule the analysed blocks for ``spec``; every concrete rule overrides this."""
        raise NotImplementedError(f"{type(self).__name__} must implement schedule()")

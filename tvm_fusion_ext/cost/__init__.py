"""Kernel cost model and the profitability check every fusion strategy consults.

* :mod:`.features` - flops, bytes and schedule class per loop nest of a scheduled PrimFunc;
* :mod:`.model` - :class:`Rates` and :class:`KernelCostModel`, the predicted time of a kernel as
  the default schedule makes it;
* :mod:`.calibration` - the host's rates, measured once per machine and cached as JSON;
* :mod:`.profitability` - :class:`ProfitabilityCheck`, a group's kernel against its parts.
"""

from .calibration import load_or_calibrate
from .model import KernelCostModel, Rates
from .profitability import ProfitabilityCheck, Verdict, fused_kernel, group_module, profitability_for

__all__ = ["KernelCostModel", "ProfitabilityCheck", "Rates", "Verdict", "fused_kernel", "group_module",
           "load_or_calibrate", "profitability_for"]

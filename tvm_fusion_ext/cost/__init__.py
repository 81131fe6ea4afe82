"""Kernel cost model and the profitability check every fusion strategy consults.

* :mod:`.features` - flops, bytes and schedule class per loop nest of a scheduled PrimFunc;
* :mod:`.model` - :class:`Rates` and :class:`KernelCostModel`, the predicted time of a kernel as
  the default schedule makes it;
* :mod:`.calibration` - the host's rates, measured once per machine and cached as JSON;
* :mod:`.gpu_model` - :class:`GPUKernelModel`, the predicted time of a kernel as the CUDA
  backend's rule chain schedules it;
* :mod:`.dsa_model` - :class:`DSAKernelModel`, the simulated time of a kernel as the DSA
  backend's staging schedule makes it;
* :mod:`.group_kernel` - the kernel a group of the dataflow graph becomes;
* :mod:`.attention_groups` - the groups whose kernel is exactly attention;
* :mod:`.chain_groups` - the groups whose kernel is a chain of two contractions in one loop nest;
* :mod:`.profitability` - :class:`ProfitabilityCheck`, a group's kernel against its parts.
"""

from .calibration import load_or_calibrate
from .dsa_model import DSAKernelModel
from .group_kernel import fused_kernel, group_module
from .model import KernelCostModel, Rates
from .profitability import ProfitabilityCheck, Verdict, profitability_for

__all__ = ["DSAKernelModel", "KernelCostModel", "ProfitabilityCheck", "Rates", "Verdict", "fused_kernel", "group_module",
           "load_or_calibrate", "profitability_for"]

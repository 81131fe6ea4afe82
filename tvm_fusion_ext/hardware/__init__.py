"""Hardware spec objects read by every scheduling pass (see :mod:`.spec`)."""

from .spec import CPUSpec, GPUSpec, HardwareSpec, register_spec, spec_for_target

__all__ = ["CPUSpec", "GPUSpec", "HardwareSpec", "register_spec", "spec_for_target"]

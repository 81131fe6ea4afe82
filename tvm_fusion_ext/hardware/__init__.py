"""Hardware spec objects read by every scheduling pass (see :mod:`.spec`)."""

from .spec import CPUSpec, HardwareSpec, register_spec, spec_for_target

__all__ = ["CPUSpec", "HardwareSpec", "register_spec", "spec_for_target"]

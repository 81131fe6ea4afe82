"""A registered DSA target: GraphTurbo's DSA abstraction (section 1, Fig. 1) for TVM.

Importing this package registers the ``dsa/<name>`` target tags for every preset
(:mod:`.target`), the spec factory for the ``"dsa"`` target key, the C math lowering, and the
``target.build.c`` override (:mod:`.codegen`). See ``docs/dsa.md``.
"""

from . import codegen  # noqa: F401  (overrides target.build.c for dsa targets)
from .profile import profile, profile_details
from .simulator import simulate
from .spec import PRESETS, ComputeUnit, DSASpec
from .target import register_dsa_target, registered_names, spec_of_target

__all__ = ["PRESETS", "ComputeUnit", "DSASpec", "profile", "profile_details",
           "register_dsa_target", "registered_names", "simulate", "spec_of_target"]

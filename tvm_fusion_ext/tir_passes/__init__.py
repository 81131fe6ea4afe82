"""TIR scheduling passes: anchor loop fusion (GraphTurbo section 4.1) with register-tiled
contraction anchors (``register_tile``: GotoBLAS micro-kernels), the plain fallback, the default
schedule pass built from them, ``VectorErf`` (float32 erf as a vectorisable polynomial), and
APOLLO's reduction canonical forms (section 4.1)."""

from .default_schedule import DefaultSchedule, default_schedule_pass
from .loop_fusion import AnchorLoopFusion
from .plain_schedule import PlainSchedule
from .reduction_forms import ReductionForm, canonicalize_reduction, reduction_form
from .vector_erf import VectorErf

__all__ = ["AnchorLoopFusion", "DefaultSchedule", "PlainSchedule", "ReductionForm",
           "VectorErf", "canonicalize_reduction", "default_schedule_pass", "reduction_form"]

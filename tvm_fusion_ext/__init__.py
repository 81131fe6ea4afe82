"""tvm_fusion_ext: published operator-fusion and scheduling methods for Apache TVM 0.27 Relax.

Importing the package registers every pass (global functions ``tvm_fusion_ext.<PassName>``), the
``dsa/*`` targets, and every fusion pipeline (``relax_pipeline="tvm_fusion_ext.<name>"``,
:mod:`.pipelines.strategies`). Importing twice is harmless.
"""

from . import target_dsa  # noqa: F401  (registers dsa/* target tags and their codegen)
from .pipelines import fusion_names, fusion_pipeline, pipeline, register_fusion
from .relax_passes.materialize_partition import MaterializePartition

__all__ = ["MaterializePartition", "fusion_names", "fusion_pipeline", "pipeline", "register_fusion"]
__version__ = "0.1.0"

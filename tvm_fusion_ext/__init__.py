"""tvm_fusion_ext: published operator-fusion and scheduling methods for Apache TVM 0.27 Relax.

Importing the package registers every pass (global functions ``tvm_fusion_ext.<PassName>``) and
every fusion pipeline (``relax_pipeline="tvm_fusion_ext.<name>"``). Importing twice is harmless.
"""

from .pipelines import fusion_names, fusion_pipeline, pipeline, register_fusion
from .relax_passes.materialize_partition import MaterializePartition

__all__ = ["MaterializePartition", "fusion_names", "fusion_pipeline", "pipeline", "register_fusion"]
__version__ = "0.1.0"
from .relax_passes import fuse_ops_dominator  # noqa: F401, I001  (registers dominator-* strategies; order kept)
from .relax_passes import apollo_fusion  # noqa: F401  (registers apollo-* strategies)
from .relax_passes import neoflow_fusion  # noqa: F401  (registers the neoflow strategy)
from . import target_dsa  # noqa: F401  (registers dsa/* target tags and their codegen)
from .relax_passes import graphturbo_fusion  # noqa: F401  (registers the graphturbo strategy)

"""Relax module passes, one per file; every class here is also the global function
``tvm_fusion_ext.<PassName>``."""

from .apollo_fusion import ApolloFusion
from .channels_last import ChannelsLast
from .fold_batch_norm import FoldBatchNormIntoConv
from .fold_weight_layouts import FoldWeightLayouts
from .fuse_ops_dominator import FuseOpsDominator
from .graphturbo_fusion import GraphTurboFusion
from .materialize_partition import MaterializePartition
from .neoflow_fusion import NeoFlowFusion
from .open_compound_ops import OpenCompoundOps
from .parallel_fusion import ParallelFusion
from .pointwise_conv_as_matmul import PointwiseConvAsMatmul
from .schedule_execution_order import ScheduleExecutionOrder
from .simplify import AlgebraicSimplify, Simplify
from .take_as_slice import TakeAtConstantAsSlice

__all__ = ["AlgebraicSimplify", "ApolloFusion", "ChannelsLast", "FoldBatchNormIntoConv", "FoldWeightLayouts", "FuseOpsDominator",
           "GraphTurboFusion", "MaterializePartition", "NeoFlowFusion", "OpenCompoundOps",
           "ParallelFusion", "PointwiseConvAsMatmul", "ScheduleExecutionOrder", "Simplify",
           "TakeAtConstantAsSlice"]

"""Pure partitioning algorithms over :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`.

Each partitioner maps a graph to a partition of its nodes (lists of node ids); the shared
:class:`~tvm_fusion_ext.relax_passes.materialize_partition.MaterializePartition` pass turns any
partition into grouped primitive functions.
"""

from .dominator import DIRECTIONS, DominatorPartitioner, dominator_groups

__all__ = ["DIRECTIONS", "DominatorPartitioner", "dominator_groups"]

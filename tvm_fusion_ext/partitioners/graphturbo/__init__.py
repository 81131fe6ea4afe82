"""GraphTurbo (graphturbo-dsa-scheduling.txt sections 3 and 4) as pure algorithms.

Over :class:`~.ops.TurboGraph` (built from the shared DataflowGraph or by hand): SplitInfo and
BestSplit (:mod:`.split_info`, Algorithm 1, Eq. (1)), grouping (:mod:`.grouping`, Algorithm 2),
instances and their order (:mod:`.instances`, Algorithm 3), core binding and buffer scopes
(:mod:`.binding`, Algorithm 4), memory allocation with the longest-liveness spill (:mod:`.memory`,
section 4.3) and the partitioner the Relax pass uses (:mod:`.partitioner`).
"""

from .binding import BINDING_FACTORS, infer_bindings, plain_binding
from .grouping import Grouping, group_subgraphs
from .instances import bfs_order, build_instances, choose_order, dfs_order, order_peak
from .memory import Tensor, allocate
from .ops import TurboGraph, TurboOp, from_dataflow_graph
from .partitioner import GraphTurboPartitioner
from .split_info import MAX_RECOMPUTE_RATIO, Split, best_split, peak_bytes, split_info

__all__ = ["BINDING_FACTORS", "MAX_RECOMPUTE_RATIO", "GraphTurboPartitioner", "Grouping", "Split",
           "Tensor", "TurboGraph", "TurboOp", "allocate", "best_split", "bfs_order",
           "build_instances", "choose_order", "dfs_order", "from_dataflow_graph", "group_subgraphs",
           "infer_bindings", "order_peak", "peak_bytes", "plain_binding", "split_info"]

"""APOLLO (apollo-fusion.txt): partition by rules, memory stitching, parallelism stitching.

Pure algorithms over :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`, testable without
compiling: Table 1 / Table 2 as data (:mod:`.rules`), Algorithm 1 (:mod:`.aggregation`), Algorithm 2
(:mod:`.memory_stitching`), Algorithm 3 with Cost Model (3) (:mod:`.parallel_stitching`,
:mod:`.cost_model`), upward feedback (:mod:`.feedback`), the layer driver (:mod:`.partitioner`), and the closing of
opened compound ops that no group fused with another op (:mod:`.compound_ops`).
The IR side is :mod:`tvm_fusion_ext.relax_passes.apollo_fusion`.
"""

from .aggregation import aggregate
from .cost_model import RooflineCostModel, gain
from .feedback import FeedbackStore
from .memory_stitching import LoopFacts, stitch_memory
from .micro_graphs import MicroGraphs, composition_pattern, extract_subgraphs
from .parallel_stitching import MAX_BRANCHES, stitch_parallel
from .partitioner import LAYERS, ApolloPartitioner
from .rules import TABLE_1, TABLE_2, Rule, without_rules

__all__ = ["LAYERS", "MAX_BRANCHES", "TABLE_1", "TABLE_2", "ApolloPartitioner", "FeedbackStore",
           "LoopFacts", "MicroGraphs", "RooflineCostModel", "Rule", "aggregate", "composition_pattern",
           "extract_subgraphs", "gain", "stitch_memory", "stitch_parallel", "without_rules"]

"""``tvm-fusion explain``: a strategy's kernels as a table, an SVG drawing and Graphviz DOT text."""

from .groups import BlockReport, FusionReport, Group, explain, prefusion

__all__ = ["BlockReport", "FusionReport", "Group", "explain", "prefusion"]

"""Colours and labels shared by the SVG and DOT drawings of a :class:`~.groups.FusionReport`."""

from __future__ import annotations

import colorsys

from ..analysis.graph import DataflowGraph, NodeKind, OpNode
from ..partitioners.apollo.micro_graphs import apollo_type
from .groups import FusionReport, Group, human_bytes, op_label, order_ranges

LONE_FILL, LONE_STROKE = "#f3f3f3", "#a0a0a0"  # a kernel of one op: boxed, not coloured
PLUMBING_FILL = "#e8e8e8"  # tuples, items, library calls: no kernel of their own


def group_colours(group: Group) -> tuple[str, str]:
    """(fill, stroke) of a fused group: hues a golden angle apart, so neighbours differ."""
    if not group.fused:
        return LONE_FILL, LONE_STROKE
    hue = (group.kernel * 0.381966) % 1.0
    return _hex(hue, 0.88, 0.70), _hex(hue, 0.40, 0.55)


def _hex(hue: float, lightness: float, saturation: float) -> str:
    r, g, b = colorsys.hls_to_rgb(hue, lightness, saturation)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def node_lines(graph: DataflowGraph, index: int) -> tuple[str, str]:
    """Two lines for an op: what it is, then its output shape and APOLLO type."""
    node = graph.nodes[index]
    shape = "x".join(map(str, node.shapes[0])) if len(node.shapes) == 1 else f"{len(node.shapes)} outputs"
    detail = f"{shape} {apollo_type(node).value}" if node.kind is NodeKind.CALL_TIR else shape
    return op_label(graph, index), detail


def node_tooltip(node: OpNode) -> str:
    what = f"call_tir {node.callee}" if node.callee else node.kind.value
    return (f"{node.name} = {what}\nAPOLLO type {apollo_type(node).value}, op pattern {node.pattern.name}\n"
            f"shapes {list(node.shapes)} {list(node.dtypes)}, {human_bytes(node.out_bytes)}")


def group_title(group: Group) -> str:
    return f"#{group.kernel} {group.name}" if group.fused else f"#{group.kernel}"


def group_subtitle(group: Group) -> str:
    """The second title line: bytes kept on chip (fused groups), GraphTurbo's instances."""
    parts = [f"kept {human_bytes(group.kept_bytes)} on chip"] if group.fused else []
    if group.instances:
        parts.append(instance_label(group))
    return "; ".join(parts)


def instance_label(group: Group) -> str:
    """GraphTurbo: how many instances the group runs as, and where they are in the order."""
    count = len(group.instances)
    return f"{count} instance{'s' if count > 1 else ''}, order {order_ranges(group.instances)}"


def group_tooltip(group: Group) -> str:
    lines = [f"kernel #{group.kernel}: {group.name}, {len(group.members)} bindings",
             (f"{human_bytes(group.boundary_bytes)} across its boundary, "
             f"{human_bytes(group.kept_bytes)} kept on chip")]
    if group.rule:
        lines.append(group.rule)
    if group.instances:
        lines.append(instance_label(group))
    return "\n".join(lines)


def caption(report: FusionReport) -> str:
    fused = sum(1 for g in report.groups if g.fused)
    return (f"{report.model} | fusion {report.fusion} | target {report.target} | {report.kernels} kernels "
            f"({fused} fused) | {human_bytes(report.boundary_bytes)} across kernel boundaries")

"""Graphviz DOT text of a :class:`~.groups.FusionReport` (written directly; no Graphviz needed).

Every fused group is a ``subgraph cluster_k<kernel>`` filled with the group's colour and labelled
like the SVG's boxes; single-op kernels are filled grey nodes, bindings no kernel runs (tuples,
items, library calls) grey ellipses. ``dot -Tsvg`` lays it out where Graphviz is installed.
"""

from __future__ import annotations

from .groups import FusionReport
from .style import LONE_FILL, PLUMBING_FILL, caption, group_colours, group_subtitle, group_title, node_lines


def render_dot(report: FusionReport) -> str:
    lines = [f"digraph {_quote(report.model + ' / ' + report.fusion)} {{",
             f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, label={_quote(caption(report))}];",
             ("  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=Helvetica, "
             "fontsize=10];"),
             "  edge [color=\"#555555\", arrowsize=0.6];"]
    for b, block in enumerate(report.blocks):
        owned = block.group_of()
        for group in block.groups:
            if not group.fused:
                continue
            names = " ".join(_node_id(b, m) for m in group.members)
            fill, stroke = group_colours(group)
            title = "\\n".join(_escape(t) for t in (group_title(group), group_subtitle(group)))
            lines.append(f"  subgraph cluster_k{group.kernel} {{")
            lines.append(f"    label=\"{title}\"; style=\"rounded,filled\"; "
                         f"fillcolor=\"{fill}\"; color=\"{stroke}\"; fontname=Helvetica; fontsize=10;")
            lines.append(f"    {names};")
            lines.append("  }")
        for node in block.graph.nodes:
            label = "\\n".join(_escape(line) for line in node_lines(block.graph, node.index))
            attrs = f"label=\"{label}\""
            gi = owned.get(node.index)
            if gi is None:
                attrs += f", shape=ellipse, style=filled, fillcolor=\"{PLUMBING_FILL}\""
            elif not block.groups[gi].fused:
                attrs += f", fillcolor=\"{LONE_FILL}\", xlabel=\"#{block.groups[gi].kernel}\""
            lines.append(f"  {_node_id(b, node.index)} [{attrs}];")
        for node in block.graph.nodes:
            for p in node.inputs:
                lines.append(f"  {_node_id(b, p)} -> {_node_id(b, node.index)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_id(block: int, node: int) -> str:
    return f"b{block}_n{node}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\"", "\\\"")


def _quote(text: str) -> str:
    return f"\"{_escape(text)}\""

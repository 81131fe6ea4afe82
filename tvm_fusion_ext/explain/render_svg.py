"""The SVG drawing of a :class:`~.groups.FusionReport`, written with ``xml.etree`` (no Graphviz).

One ``<g class="kernel">`` per kernel (``fused`` added when it runs several ops): a rounded box
in the group's colour around its ops, titled with the kernel's position in execution order, its
name, and on a second line the bytes it keeps on chip and, for GraphTurbo, its instances' positions
in the chosen order. Ops are ``<g class="op">``, edges ``<path class="edge">``;
hovering shows details (``<title>``). The layout is :func:`~.layout.layout_block`'s.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .groups import FusionReport
from .layout import HEADER, LONE_HEADER, LONE_PAD, NODE_H, NODE_W, PAD, SUBTITLE, layout_block
from .style import (
    PLUMBING_FILL,
    caption,
    group_colours,
    group_subtitle,
    group_title,
    group_tooltip,
    node_lines,
    node_tooltip,
)

SVG_NS = "http://www.w3.org/2000/svg"
FONT = 11
CAPTION_H = 36
_STYLE = (".edge{fill:none;stroke:#555;stroke-width:1.1;opacity:.75}"
          ".op rect{stroke:#333;stroke-width:.8} .box{stroke-width:1.4}"
          "text{font-family:Helvetica,Arial,sans-serif} .title{font-weight:bold}")


def render_svg(report: FusionReport) -> str:
    """The drawing as SVG text (blocks one under the other)."""
    ET.register_namespace("", SVG_NS)
    root = ET.Element("svg", {"xmlns": SVG_NS, "version": "1.1"})
    ET.SubElement(root, "style").text = _STYLE
    defs = ET.SubElement(root, "defs")
    marker = ET.SubElement(defs, "marker", {"id": "arrow", "viewBox": "0 0 10 10", "refX": "10", "refY": "5",
                                            "markerWidth": "7", "markerHeight": "7", "orient": "auto"})
    ET.SubElement(marker, "path", {"d": "M0,0 L10,5 L0,10 z", "fill": "#555"})
    title = caption(report)
    _text(root, 12, 22, title, 13, "title")
    top, width = float(CAPTION_H), 24 + len(title) * 0.68 * 13
    for block in report.blocks:
        layout = layout_block(block.graph, [g.members for g in block.groups],
                              [bool(group_subtitle(g)) for g in block.groups])
        layer = ET.SubElement(root, "g", {"class": "block", "transform": f"translate(0,{top:.1f})"})
        boxes = [(block.groups[u.box], u) for u in layout.units if u.box is not None]
        for group, unit in boxes:
            _box(layer, group, unit)
        for _, _, points in layout.edges:
            ET.SubElement(layer, "path", {"class": "edge", "d": _curve(points), "marker-end": "url(#arrow)"})
        for group, unit in boxes:  # titles over the edges entering the box
            _box_title(layer, group, unit)
        owned = block.group_of()
        for node in block.graph.nodes:
            _op(layer, block.graph, node, layout.nodes[node.index], node.index in owned)
        top += layout.height
        width = max(width, layout.width)
    root.set("width", f"{width:.0f}")
    root.set("height", f"{top:.0f}")
    root.set("viewBox", f"0 0 {width:.0f} {top:.0f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _box(parent, group, unit) -> None:
    """The kernel's ``<g>`` with its box; its title comes after the edges (:func:`_box_title`)."""
    fill, stroke = group_colours(group)
    classes = "kernel fused" if group.fused else "kernel"
    g = ET.SubElement(parent, "g", {"class": classes, "id": f"kernel-{group.kernel}"})
    ET.SubElement(g, "title").text = group_tooltip(group)
    ET.SubElement(g, "rect", {"class": "box", "x": f"{unit.x:.1f}", "y": f"{unit.y:.1f}",
                              "width": f"{unit.width:.1f}", "height": f"{unit.height:.1f}",
                              "rx": "9", "fill": fill, "stroke": stroke})


def _box_title(parent, group, unit) -> None:
    """Title and subtitle lines, drawn with a halo of the box colour."""
    fill, stroke = group_colours(group)
    g = ET.SubElement(parent, "g", {"class": "box-title", "data-kernel": str(group.kernel)})
    if group.fused:
        label = _fit(group_title(group), unit.width - 2 * PAD, FONT, bold=True)
        _text(g, unit.x + PAD, unit.y + PAD + HEADER - 6, label, FONT, "title", fill=stroke, halo=fill)
        left, top = unit.x + PAD, unit.y + PAD + HEADER
    else:
        _text(g, unit.x + LONE_PAD, unit.y + LONE_HEADER - 3, group_title(group), FONT - 3, "title",
              fill="#666")
        left, top = unit.x + LONE_PAD, unit.y + LONE_HEADER
    subtitle = group_subtitle(group)
    if subtitle:
        label = _fit(subtitle, unit.width - 2 * (left - unit.x), FONT - 2)
        _text(g, left, top + SUBTITLE - 4, label, FONT - 2, "subtitle", fill="#333", halo=fill)


def _op(parent, graph, node, position, owned: bool) -> None:
    x, y = position
    g = ET.SubElement(parent, "g", {"class": "op", "id": f"op-{node.index}"})
    ET.SubElement(g, "title").text = node_tooltip(node)
    ET.SubElement(g, "rect", {"x": f"{x:.1f}", "y": f"{y:.1f}", "width": str(NODE_W), "height": str(NODE_H),
                              "rx": "4", "fill": "white" if owned else PLUMBING_FILL})
    first, second = node_lines(graph, node.index)
    _text(g, x + NODE_W / 2, y + 14, _fit(first, NODE_W - 8, FONT, middle=True), FONT, anchor="middle")
    _text(g, x + NODE_W / 2, y + 27, _fit(second, NODE_W - 8, FONT - 2), FONT - 2, anchor="middle",
          fill="#555")


def _text(parent, x, y, text, size, cls=None, anchor="start", fill="#222", halo=None) -> None:
    attrs = {"x": f"{x:.1f}", "y": f"{y:.1f}", "font-size": str(size), "text-anchor": anchor, "fill": fill}
    if cls:
        attrs["class"] = cls
    if halo:
        attrs.update({"stroke": halo, "stroke-width": "3", "paint-order": "stroke"})
    ET.SubElement(parent, "text", attrs).text = text


def _fit(text: str, width: float, size: int, bold: bool = False, middle: bool = False) -> str:
    """``text`` cut to about ``width`` pixels at ``size`` (average glyph: 0.6 em, bold 0.68 em), at
    its end or (``middle``, for op names whose tail tells them apart) in its middle."""
    chars = max(int(width / ((0.68 if bold else 0.6) * size)), 2)
    if len(text) <= chars:
        return text
    if middle:
        head = (chars - 1) // 2
        return text[:head] + "…" + text[len(text) - (chars - 1 - head):]
    return text[:chars - 1] + "…"


def _curve(points) -> str:
    """A smooth path through ``points``: vertical tangents at each one (rows run top to bottom)."""
    (x0, y0), *rest = points
    d = [f"M{x0:.1f},{y0:.1f}"]
    for (px, py), (qx, qy) in zip(points, rest):
        mid = (py + qy) / 2
        d.append(f"C{px:.1f},{mid:.1f} {qx:.1f},{mid:.1f} {qx:.1f},{qy:.1f}")
    return " ".join(d)

"""A bar chart of a :class:`~.evaluation.Report` as SVG, written with ``xml.etree``: one bar per
row (latency, ms), the strategies in one colour, the reference rows (PyTorch, ONNX Runtime) in
another, a whisker over each bar from its fastest to its slowest round, and the speedup over
``stock`` beside it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .evaluation import REFERENCE_ROWS, Report

SVG_NS = "http://www.w3.org/2000/svg"
LABEL_W, BAR_W, VALUE_W, ROW_H, TOP, BOTTOM = 140, 420, 150, 26, 44, 16
STRATEGY_FILL, REFERENCE_FILL, WHISKER = "#4c78a8", "#b0b0b0", "#333333"


def latency_svg(report: Report) -> str:
    """The chart as SVG text; rows whose latency is unknown (not a number) are left out."""
    rows = [row for row in report.rows if row.latency_ms == row.latency_ms]
    slowest = max([max(row.latency_rounds_ms or [row.latency_ms]) for row in rows] or [1.0])
    width, height = LABEL_W + BAR_W + VALUE_W, TOP + ROW_H * len(rows) + BOTTOM
    ET.register_namespace("", SVG_NS)
    root = ET.Element("svg", {"xmlns": SVG_NS, "version": "1.1", "width": str(width), "height": str(height),
                              "font-family": "Helvetica,Arial,sans-serif", "font-size": "12"})
    _text(root, 8, 18, f"{report.model}: latency per row ({report.policy})", bold=True)
    _text(root, 8, 34, report.machine, size=10)

    def scale(ms: float) -> float:
        return BAR_W * ms / slowest

    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        reference = row.fusion in REFERENCE_ROWS
        _text(root, LABEL_W - 6, y + 16, row.fusion, anchor="end")
        bar = ET.SubElement(root, "rect", {
            "class": "bar reference" if reference else "bar", "x": str(LABEL_W), "y": str(y + 4),
            "width": f"{scale(row.latency_ms):.1f}", "height": str(ROW_H - 8),
            "fill": REFERENCE_FILL if reference else STRATEGY_FILL})
        ET.SubElement(bar, "title").text = f"{row.fusion}: {row.latency_ms:.3f} ms"
        if row.latency_rounds_ms:
            low, high = min(row.latency_rounds_ms), max(row.latency_rounds_ms)
            ET.SubElement(root, "line", {
                "class": "spread", "x1": f"{LABEL_W + scale(low):.1f}", "x2": f"{LABEL_W + scale(high):.1f}",
                "y1": str(y + ROW_H // 2), "y2": str(y + ROW_H // 2), "stroke": WHISKER, "stroke-width": "1.5"})
        value = f"{row.latency_ms:.3f} ms"
        if row.speedup_vs_stock is not None:
            value += f"  ({row.speedup_vs_stock:.2f}x stock)"
        _text(root, LABEL_W + scale(row.latency_ms) + 6, y + 16, value, size=11)
    return ET.tostring(root, encoding="unicode")


def _text(parent, x: float, y: float, text: str, anchor: str = "start", bold: bool = False, size: int = 12):
    attrs = {"x": f"{x:.1f}", "y": f"{y:.1f}", "text-anchor": anchor, "font-size": str(size)}
    if bold:
        attrs["font-weight"] = "bold"
    ET.SubElement(parent, "text", attrs).text = text

"""Consistency checks of a :class:`~.groups.FusionReport` and its drawings (tests and
``scripts/explain_all.py``): the report against the module ``FuseTIR`` makes, the SVG and DOT
against the report."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tvm import relax

from ..analysis.kernel_traffic import kernel_traffic
from .groups import FusionReport
from .render_dot import render_dot
from .render_svg import SVG_NS, render_svg


def check_report(report: FusionReport) -> tuple[str, str]:
    """Assert that ``report`` and its drawings agree with what the strategy compiles; returns the
    (SVG, DOT) texts.

    * one group per kernel ``FuseTIR`` makes of ``report.fused``, and the groups' boundary bytes
      sum to that module's (:func:`~tvm_fusion_ext.analysis.kernel_traffic.kernel_traffic`);
    * the SVG parses, has one ``kernel`` box per kernel (``fused`` on each multi-op one) and one
      ``op`` per binding;
    * the DOT has one ``subgraph cluster_*`` per multi-op group and one edge per data edge.
    """
    traffic = kernel_traffic(relax.transform.FuseTIR()(report.fused))
    assert report.kernels == traffic.kernels, (report.kernels, traffic.kernels)
    assert report.boundary_bytes == traffic.boundary_bytes, (report.boundary_bytes, traffic.boundary_bytes)
    svg, dot = render_svg(report), render_dot(report)
    root = ET.fromstring(svg)
    groups = [g.get("class", "").split() for g in root.iter(f"{{{SVG_NS}}}g")]
    fused = sum(1 for g in report.groups if g.fused)
    assert sum("kernel" in c for c in groups) == report.kernels
    assert sum("fused" in c for c in groups) == fused
    assert sum(c == ["op"] for c in groups) == sum(len(b.graph) for b in report.blocks)
    assert dot.count("subgraph cluster_") == fused
    assert dot.count(" -> ") == sum(len(n.inputs) for b in report.blocks for n in b.graph.nodes)
    return svg, dot

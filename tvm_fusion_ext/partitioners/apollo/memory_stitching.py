"""Algorithm 2 (Appendix A): Layer II memory stitching by Table 2 (section 4.2).

A reduction micro-graph merges with a following element-wise / broadcast micro-graph (rule 7) or a
following reduction (rule 8) when

* ``consist_dim_and_param``: both have the same parallel loop dimensions and Layer I gives them the
  same hardware parameters. Layer I (the loop-fusion schedule) tiles a reduction micro-graph by its
  *rows*, the non-reduced loops, and splits the rows across the spec's cores; a stitched consumer
  must iterate the same rows in the same position (outer rows for a y-reduce, inner for an
  x-reduce), and two stitched reductions must have equal rows. Under one spec the split (cores
  used, rows per core) is a function of the rows, so equal rows give identical hardware parameters.
  An all-reduce has no rows: it is split across cores along the reduced loop, which no element-wise
  consumer can share, so rule 7 never applies to it;
* ``have_identical_canonical_form`` (rule 8 only): the reductions share one of the three canonical
  forms of section 4.1 (:class:`~tvm_fusion_ext.tir_passes.reduction_forms.ReductionForm`).

Each tensor carried by a stitched edge is allocated on local memory when one tile of it (the slice
of one row) fits the spec's fast memory, else on global memory (lines 8-9); the decisions are
returned with the stitched pairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...analysis.graph import DataflowGraph, NodeKind
from ...analysis.primitive_types import PrimitiveType
from ...hardware import HardwareSpec
from ...tir_passes.reduction_forms import ReductionForm
from .micro_graphs import MicroGraphs
from .rules import TABLE_2, RuleLevel, find_rule


@dataclass(frozen=True)
class LoopFacts:
    """What Layer I's schedule of one op fixes: its loop extents, and for a reduction its form.

    ``extents`` are the op's output extents with unit dimensions dropped; for a reduction they are
    its rows (the non-reduced loops), and ``form`` its canonical form.
    """

    extents: tuple[int, ...]
    form: ReductionForm | None = None


@dataclass(frozen=True)
class Allocation:
    """Lines 8-9 of Algorithm 2: where the tensor of a stitched edge lives."""

    producer: int
    tile_bytes: int
    memory: str  # "local" or "global"


@dataclass
class StitchReport:
    stitched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    refused_form: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)


def _space(state: MicroGraphs, group: int, facts: Mapping[int, LoopFacts]):
    """``(form, rows)`` of a reduction micro-graph: every reduction in it must agree, else None."""
    spaces = {(facts[n].form, facts[n].extents) for n in state.nodes_of(group)
              if state.graph.nodes[n].ptype is PrimitiveType.REDUCTION and n in facts}
    return next(iter(spaces)) if len(spaces) == 1 else None


def _fits_rows(form: ReductionForm, rows: tuple[int, ...], extents: tuple[int, ...]) -> bool:
    if form is ReductionForm.Y:
        return extents[:len(rows)] == rows
    if form is ReductionForm.X:
        return extents[len(extents) - len(rows):] == rows
    return True


def consist_dim_and_param(state: MicroGraphs, gp: int, gc: int, facts: Mapping[int, LoopFacts]
                          ) -> bool:
    """Line 2 of Algorithm 2 (see the module docstring)."""
    space_p = _space(state, gp, facts)
    if space_p is None:
        return False
    form, rows = space_p
    if state.type_of(gc) is PrimitiveType.REDUCTION:
        space_c = _space(state, gc, facts)
        if space_c is None or space_c[1] != rows:
            return False
    elif not rows:
        return False  # rule 7 on an all-reduce
    for n in state.nodes_of(gp) | state.nodes_of(gc):
        node = state.graph.nodes[n]
        if node.ptype is PrimitiveType.REDUCTION or n not in facts:
            continue
        if not _fits_rows(form, rows, facts[n].extents):
            return False
    return True


def have_identical_canonical_form(state: MicroGraphs, gp: int, gc: int,
                                  facts: Mapping[int, LoopFacts]) -> bool:
    """Line 3 of Algorithm 2: both micro-graphs' reductions are in one canonical form."""
    space_p, space_c = _space(state, gp, facts), _space(state, gc, facts)
    return space_p is not None and space_c is not None and space_p[0] is space_c[0]


def stitch_memory(state: MicroGraphs, facts: Mapping[int, LoopFacts], spec: HardwareSpec,
                  rules: Sequence[RuleLevel] = TABLE_2) -> StitchReport:
    """Algorithm 2 on Layer I's micro-graphs (merges in place; returns what was stitched)."""
    report = StitchReport()
    for level in rules:  # line 1
        changed = True
        while changed:  # rules apply recursively (section 4.2)
            changed = False
            for p, c in state.edges():
                gp, gc = state.find(p), state.find(c)
                if gp == gc:
                    continue
                rule = find_rule(level, state.type_of(gp), state.type_of(gc))
                if rule is None or not state.can_merge((gp, gc)):
                    continue
                if not consist_dim_and_param(state, gp, gc, facts):
                    continue  # line 2
                if rule.name == "8" and not have_identical_canonical_form(state, gp, gc, facts):
                    report.refused_form.append((tuple(sorted(state.nodes_of(gp))),
                                                tuple(sorted(state.nodes_of(gc)))))
                    continue  # line 3
                rows = _space(state, gp, facts)[1]
                edge_nodes = sorted({q for n in state.nodes_of(gc) for q in state.graph.nodes[n].inputs
                                     if state.find(q) == gp})
                report.stitched.append((rule.name, tuple(sorted(state.nodes_of(gp))),
                                        tuple(sorted(state.nodes_of(gc)))))
                state.merge((gp, gc), rule.result, rule.name)  # lines 4-7
                for q in edge_nodes:  # lines 8-9
                    tile = state.graph.nodes[q].out_bytes // max(1, math.prod(rows) if rows else 1)
                    memory = "local" if tile <= spec.fast_memory_bytes else "global"
                    report.allocations.append(Allocation(q, tile, memory))
                changed = True
    return report


def loop_facts(graph: DataflowGraph) -> dict[int, LoopFacts]:
    """:class:`LoopFacts` of every single-block ``call_tir`` of an IR graph (after opening compound
    ops, every kernel APOLLO sees has one block). Forms come from
    :func:`~tvm_fusion_ext.tir_passes.reduction_forms.reduction_form`."""
    from tvm import s_tir

    from ...analysis.primitive_types import prim_func_blocks
    from ...tir_passes.reduction_forms import reduction_form

    facts = {}
    for node in graph.nodes:
        if node.kind is not NodeKind.CALL_TIR or node.prim_func is None or not node.shapes:
            continue
        blocks = prim_func_blocks(node.prim_func)
        if node.ptype is PrimitiveType.REDUCTION:
            if len(blocks) != 1:
                continue
            block = blocks[0]
            try:
                form = reduction_form(s_tir.Schedule(node.prim_func), block.name_hint)
                rows = tuple(int(iv.dom.extent) for iv in block.iter_vars
                             if iv.iter_type == 0 and int(iv.dom.extent) > 1)
            except (TypeError, ValueError, RuntimeError):
                continue  # symbolic extents: no facts, no stitching
            facts[node.index] = LoopFacts(rows, form)
        else:
            facts[node.index] = LoopFacts(tuple(d for d in node.shapes[0] if d > 1))
    return facts

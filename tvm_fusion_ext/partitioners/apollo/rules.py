"""APOLLO's aggregation rules as data: Table 1 (section 3.3) and Table 2 (section 4.2).

A rule is one row ``(producer type, consumer type) -> result type``. Rules are grouped into
priority levels; Algorithm 1 applies the levels of :data:`TABLE_1` in order (line 4:
``{1, 2, 3, 4, 5, 6-transpose, {6-matmul}, {6-conv}}``; the two rows of 6-matmul share one level, as
do the two rows of 6-conv) and Algorithm 2 the levels of :data:`TABLE_2` (rules 7, 8). Removing a
row (or adding one) changes which micro-graphs merge and nothing else, which is how the paper's
rule set is updated from the downstream feedback (section 3.3: the reshape rule was removed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...analysis.primitive_types import PrimitiveType

EW = PrimitiveType.ELEMENTWISE
BC = PrimitiveType.BROADCAST
RED = PrimitiveType.REDUCTION
TRANSPOSE = PrimitiveType.TRANSPOSE
MATMUL = PrimitiveType.MATMUL
CONV = PrimitiveType.CONV


@dataclass(frozen=True)
class Rule:
    """One row of Table 1 / Table 2: ``producer -> consumer`` micro-graphs aggregate into ``result``."""

    name: str
    producer: PrimitiveType
    consumer: PrimitiveType
    result: PrimitiveType

    def matches(self, producer: PrimitiveType, consumer: PrimitiveType) -> bool:
        return producer is self.producer and consumer is self.consumer


RuleLevel = tuple[Rule, ...]  # rules of equal priority


def _rows(name: str, producers: Iterable[PrimitiveType], consumers: Iterable[PrimitiveType],
          result: PrimitiveType) -> tuple[Rule, ...]:
    return tuple(Rule(name, p, c, result) for p in producers for c in consumers)


# Table 1, in Algorithm 1's priority order (line 4).
TABLE_1: tuple[RuleLevel, ...] = (
    _rows("1", [EW], [EW], EW),
    _rows("2", [BC], [EW], BC),
    _rows("3", [BC], [BC], BC),
    _rows("4", [EW], [RED], RED),
    _rows("5", [BC], [RED], RED),
    _rows("6-transpose", [EW, BC], [TRANSPOSE], TRANSPOSE),
    _rows("6-matmul", [MATMUL], [EW], MATMUL) + _rows("6-matmul", [EW], [MATMUL], MATMUL),
    _rows("6-conv", [CONV], [EW], CONV) + _rows("6-conv", [EW], [CONV], CONV),
)

# Table 2 (memory stitching), in Algorithm 2's order (line 1). Rule 8 additionally requires equal
# reduction canonical forms; both require matching loop dimensions and hardware parameters.
TABLE_2: tuple[RuleLevel, ...] = (
    _rows("7", [RED], [EW, BC], RED),
    _rows("8", [RED], [RED], RED),
)


def find_rule(level: Sequence[Rule], producer: PrimitiveType, consumer: PrimitiveType) -> Rule | None:
    """The rule of ``level`` that aggregates ``producer -> consumer``, if any."""
    return next((r for r in level if r.matches(producer, consumer)), None)


def without_rules(table: Sequence[RuleLevel], *names: str) -> tuple[RuleLevel, ...]:
    """``table`` with every row named in ``names`` removed (empty levels dropped)."""
    levels = (tuple(r for r in level if r.name not in names) for level in table)
    return tuple(level for level in levels if level)

"""APOLLO's aggregation rules as data: Table 1 (section 3.3) and Table 2 (section 4.2).

A rule is one row ``(producer type, consumer type) -> result type``. Rules are grouped into
priority levels; Algorithm 1 applies the levels of :data:`TABLE_1` in order (line 4:
``{1, 2, 3, 4, 5, 6-transpose, {6-matmul}, {6-conv}}``; the rows of 6-matmul share one level, as
do the rows of 6-conv) and Algorithm 2 the levels of :data:`TABLE_2` (rules 7, 8). Removing a
row (or adding one) changes which micro-graphs merge and nothing else, which is how the paper's
rule set is updated from the downstream feedback (section 3.3: the reshape rule was removed).

:data:`TABLE_1` is the paper's table updated for this downstream compiler (TVM's ``FuseTIR`` and
the default TIR schedule rather than AKG's polyhedral scheduler), as section 3.3 prescribes:

* ``reshape`` and ``data-movement`` (the first level): the reshaping-op rule the paper removed
  because AKG could not schedule it, restored for TVM, where an op that only moves data is inlined
  into the nest that consumes it (``compute_inline``) and never constrains loop fusion. A reshaping
  op (:attr:`PrimitiveType.RESHAPE`) joins its producer or an element-wise / broadcast / transpose
  consumer and takes that micro-graph's type, so the other rules see through it. Other data
  movement (:attr:`PrimitiveType.DATA_MOVEMENT`: concatenation, slicing, padding, gathers) takes
  element-wise / broadcast / transpose / reshaping followers but keeps its type, and never
  follows another micro-graph: its output does not cover its input element for element, so it
  cannot be an epilogue (a conv followed by a concatenation is not one output tile). The level
  comes first so that data movement between two ops is absorbed before rules 1-5 see the pair;
* ``2-element-wise`` (in rule 2's level): an element-wise producer followed by a broadcast
  consumer aggregates into a broadcast micro-graph, as rule 2 aggregates the reverse order. A
  scalar constant folded into a TVM PrimFunc (``x * 0.125``) is no input of the op, so the scale
  of APOLLO's Fig. 5 chain is element-wise here where Definition 2 makes it broadcast, and without
  this row it stays out of the chain's kernel; ``FuseTIR`` inlines it into the consumer's nest;
* ``6-matmul-epilogue`` / ``6-conv-epilogue`` (in the 6-matmul / 6-conv levels): a matmul or
  conv also takes broadcast followers (bias adds, inference batch norm), reshaping followers and,
  for a matmul, transposes (the head split / merge of attention): the epilogue the default
  schedule computes inside the contraction's output tile. Table 1 only lists element-wise
  followers, which leaves every bias add of a matmul / conv in a kernel of its own.

Nothing aggregates two contractions, or a contraction with a reduction: the default schedule
tiles one anchor per kernel.
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
RESHAPE = PrimitiveType.RESHAPE
MOVE = PrimitiveType.DATA_MOVEMENT


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


def _data_movement(inner: Iterable[PrimitiveType]) -> tuple[Rule, ...]:
    """The first level (see the module docstring): ``(T, reshape) -> T`` and ``(reshape, T) -> T``
    for every type ``T`` in ``inner``; a data-movement micro-graph takes any follower of those
    types (and reshapes, and data movement) and stays data movement."""
    inner = tuple(inner)
    return ((Rule("reshape", RESHAPE, RESHAPE, RESHAPE),)
            + tuple(Rule("reshape", t, RESHAPE, t) for t in inner)
            + tuple(Rule("reshape", RESHAPE, t, t) for t in inner)
            + _rows("data-movement", [MOVE], [*inner, RESHAPE, MOVE], MOVE)
            + _rows("data-movement", [RESHAPE], [MOVE], MOVE))


# Table 1 for TVM (see the module docstring), in Algorithm 1's priority order (line 4).
TABLE_1: tuple[RuleLevel, ...] = (
    _data_movement([EW, BC, TRANSPOSE]),
    _rows("1", [EW], [EW], EW),
    _rows("2", [BC], [EW], BC) + _rows("2-element-wise", [EW], [BC], BC),
    _rows("3", [BC], [BC], BC),
    _rows("4", [EW], [RED], RED),
    _rows("5", [BC], [RED], RED),
    _rows("6-transpose", [EW, BC], [TRANSPOSE], TRANSPOSE),
    _rows("6-matmul", [MATMUL], [EW], MATMUL) + _rows("6-matmul", [EW], [MATMUL], MATMUL)
    + _rows("6-matmul-epilogue", [MATMUL], [BC, RESHAPE, TRANSPOSE], MATMUL),
    _rows("6-conv", [CONV], [EW], CONV) + _rows("6-conv", [EW], [CONV], CONV)
    + _rows("6-conv-epilogue", [CONV], [BC, RESHAPE], CONV),
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

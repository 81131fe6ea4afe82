"""Algorithm 1 (Appendix A): aggregating primitive ops into micro-graphs by Table 1 (section 3.3).

Every eligible op starts as its own micro-graph typed by its primitive type; the rule levels of
Table 1 are applied in priority order, each repeated until nothing changes, merging a producer /
consumer pair ``(Gp, Gc)`` when a rule of the level matches their types and the merge is acyclic.
The merged micro-graph takes the rule's result type, so rules apply recursively, and the loop ends
when no defined combination is left.
"""

from __future__ import annotations

from collections.abc import Sequence

from .micro_graphs import MicroGraphs
from .rules import TABLE_1, RuleLevel, find_rule


def aggregate(state: MicroGraphs, rules: Sequence[RuleLevel] = TABLE_1) -> MicroGraphs:
    """Algorithm 1 over every sub-graph of ``state`` (merges happen in place; returns ``state``)."""
    for level in rules:  # line 4: rules in priority order
        changed = True
        while changed:  # lines 5-6
            changed = False
            for p, c in state.edges():  # e between (Gp, Gc)
                gp, gc = state.find(p), state.find(c)
                if gp == gc:
                    continue  # merged earlier in this sweep
                rule = find_rule(level, state.type_of(gp), state.type_of(gc))
                if rule is not None and state.can_merge((gp, gc)):  # type match and acyclic(Gp, Gc)
                    state.merge((gp, gc), rule.result, rule.name)  # lines 7-8
                    changed = True  # line 9
    return state

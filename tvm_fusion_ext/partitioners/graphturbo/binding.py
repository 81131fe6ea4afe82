"""Core binding and buffer scopes (Algorithm 4, section 3.4).

A binding is one factor per output dimension (cores along that dimension). ``plain_binding``
greedily gives cores from the outermost dimension inwards, trying 8, 4, 2, 1 (load balance: the
factor must divide the extent); annotated dimensions (``unbindable``) get 1. Algorithm 4 walks the
schedule order backwards: an instance without an inferred binding, or whose output is not in LB,
takes its plain binding; otherwise its inferred binding is kept unless the plain one uses more cores
(line 16). The binding is then propagated to its producers (``infer_binding``: same-rank outputs
take the factors dimension by dimension); a producer that already has a different binding keeps it
and its output goes to GB (lines 11-12), since a redistribution is needed (section 3.5).

The listing places the propagation (lines 6-14) under the ``if`` of line 4 only; we propagate after
line 16 too, otherwise a chain's producers would never be checked against an inferred consumer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BINDING_FACTORS = (8, 4, 2, 1)
LB, GB = "LB", "GB"


@dataclass
class BindingResult:
    bind: dict[int, tuple[int, ...]]
    scope: dict[int, str]


def plain_binding(shape: tuple[int, ...], cores: int, unbindable=frozenset()) -> tuple[int, ...]:
    """Greedy factors 8/4/2/1 from the outermost dimension, within ``cores`` in total."""
    left, bind = cores, []
    for d, extent in enumerate(shape):
        factor = 1
        if d not in unbindable:
            factor = next(f for f in BINDING_FACTORS if f <= left and extent % f == 0)
        bind.append(factor)
        left //= factor
    return tuple(bind)


def infer_binding(bind: tuple[int, ...], producer_shape: tuple[int, ...],
                  unbindable=frozenset()) -> tuple[int, ...] | None:
    """A producer's binding from its consumer's (Algorithm 1 line 10's dimension matching); None if
    the ranks differ (nothing to infer) or a factor hits an unbindable or indivisible dimension
    (invalid)."""
    if len(bind) != len(producer_shape):
        return None
    for d, (f, extent) in enumerate(zip(bind, producer_shape)):
        if f > 1 and (d in unbindable or extent % f):
            return None
    return tuple(bind)


def cores_used(bind: tuple[int, ...]) -> int:
    return math.prod(bind)


def infer_bindings(order: list[int], shapes: dict[int, tuple[int, ...]],
                   producers: dict[int, list[int]], cores: int,
                   unbindable: dict[int, frozenset] | None = None) -> BindingResult:
    """Algorithm 4 over a schedule ``order`` of instances (ids), their output ``shapes`` and
    ``producers``; ``cores`` per cluster."""
    unbindable = unbindable or {}
    bind: dict[int, tuple[int, ...]] = {}
    scope = {i: LB for i in order}
    for i in reversed(order):
        plain = plain_binding(shapes[i], cores, unbindable.get(i, frozenset()))
        if i not in bind or scope[i] != LB:
            bind[i] = plain
        else:
            updated = tuple(1 if d in unbindable.get(i, ()) else f for d, f in enumerate(bind[i]))
            bind[i] = updated if cores_used(updated) >= cores_used(plain) else plain
        for j in producers.get(i, []):
            inferred = infer_binding(bind[i], shapes[j], unbindable.get(j, frozenset()))
            if inferred is None:
                continue
            if j not in bind:
                bind[j] = inferred
            elif bind[j] != inferred:
                scope[j] = GB
    return BindingResult(bind, scope)

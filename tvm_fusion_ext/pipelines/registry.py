"""The fusion strategy registry: each strategy's name, description and the passes it adds.

A strategy enters it through :func:`~.registration.register_fusion` (which also exposes it as the
TVM pipeline ``tvm_fusion_ext.<name>``); :mod:`.strategies` registers every strategy of the
package. The phase builders (:mod:`.phases`) look strategies up here by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm

FusionPasses = Callable[..., list]  # (target) -> [Pass, ...]; (target, cost_check=...) if cost_checked


@dataclass(frozen=True)
class FusionStrategy:
    """A named fusion strategy: the passes that run between pre-processing and ``FuseTIR``."""

    name: str
    description: str
    fusion_passes: FusionPasses
    # Extra pre-processing a strategy needs (e.g. APOLLO's simplifications); said in the description.
    extra_preprocess: FusionPasses | None = None
    # Extra pre-processing on high-level Relax, before LegalizeOps (e.g. NeoFlow's graph
    # simplification and parallel fusion, which rewrite Relax ops); said in the description.
    high_level_preprocess: FusionPasses | None = None
    # The strategy consults the profitability check (tvm_fusion_ext.cost): ``fusion_passes`` then
    # takes ``cost_check`` (False: the paper's decisions as written) after the target.
    cost_checked: bool = False

    def passes(self, target: tvm.target.Target, cost_check: bool = True) -> list:
        """The fusion passes for ``target``; ``cost_check`` reaches strategies that take it."""
        if self.cost_checked:
            return self.fusion_passes(target, cost_check=cost_check)
        return self.fusion_passes(target)


_STRATEGIES: dict[str, FusionStrategy] = {}


def add_strategy(strategy: FusionStrategy) -> None:
    """Add (or replace, keeping its place in the order) ``strategy`` under its name."""
    _STRATEGIES[strategy.name] = strategy


def fusion_names() -> list[str]:
    """Names of all registered fusion strategies, in registration order."""
    return list(_STRATEGIES)


def get_strategy(name: str) -> FusionStrategy:
    if name not in _STRATEGIES:
        raise ValueError(f"unknown fusion strategy {name!r}; known: {', '.join(_STRATEGIES)}")
    return _STRATEGIES[name]

"""Memory allocation and reuse with the longest-liveness spill (section 4.3, Fig. 12).

Computation tasks (cts: instances, blocks or layers) run in order; a tensor is live from the ct
that defines it to the last ct that reads it, and its LB space is released right after. When the
live tensors exceed LB, the one with the longest liveness (in cts) is spilled to GB, and to DDR when
GB is full too - not the largest one, as prior work does: a long-lived tensor is more likely small.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    name: str
    size: int
    defined_at: int  # ct index
    last_use: int  # ct index

    @property
    def liveness(self) -> int:
        return self.last_use - self.defined_at


@dataclass
class Allocation:
    level: dict[str, str]  # tensor -> "LB" | "GB" | "DDR"
    spills: list[tuple[int, str, str]]  # (ct, tensor, level it went to)
    lb_peak: int


def allocate(tensors: list[Tensor], num_cts: int, lb_bytes: int, gb_bytes: int) -> Allocation:
    """Place every tensor, spilling by longest liveness when a ct's live set overflows LB (or GB)."""
    level = {t.name: "LB" for t in tensors}
    spills = []
    peak = 0
    for ct in range(num_cts):
        live = [t for t in tensors if t.defined_at <= ct <= t.last_use]
        for lvl, capacity, lower in (("LB", lb_bytes, "GB"), ("GB", gb_bytes, "DDR")):
            while sum(t.size for t in live if level[t.name] == lvl) > capacity:
                victim = max((t for t in live if level[t.name] == lvl),
                             key=lambda t: (t.liveness, -t.defined_at))
                level[victim.name] = lower
                spills.append((ct, victim.name, lower))
        peak = max(peak, sum(t.size for t in live if level[t.name] == "LB"))
    return Allocation(level, spills, peak)


def live_peak(tensors: list[Tensor], level: dict[str, str], num_cts: int, at: str) -> int:
    """Most bytes of the ``tensors`` placed at level ``at`` (``level``: tensor -> level) that are
    live during one ct."""
    return max((sum(t.size for t in tensors if level[t.name] == at and t.defined_at <= ct <= t.last_use)
                for ct in range(num_cts)), default=0)

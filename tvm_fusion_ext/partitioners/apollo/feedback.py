"""Upward feedback (sections 2, 4.1 and 5): what the downstream compiler could not handle.

When a micro-graph fails downstream (FuseTIR or lowering raises, or compiling it exceeds the time
budget), its composition pattern (:func:`~.micro_graphs.composition_pattern`) is recorded and the
partition is regenerated with merges into that pattern refused, so the failing micro-graph is split.
The patterns persist in a JSON file that the next run reads before partitioning, so a pattern that
failed once is never tried again: the rule set learns. Parallel compositions rejected by Cost Model
(3) are logged in the same file (section 5, auto-tuning) for developers designing new rules.

File format (``version`` 1)::

    {"version": 1,
     "failed_patterns": [{"pattern": str, "reason": str, "ops": [str, ...]}, ...],
     "rejected_parallel": [{"patterns": [str, ...], "gain_s": float}, ...]}
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VERSION = 1


class FeedbackStore:
    """Failed patterns and rejected parallel compositions; persisted when ``path`` is given."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self.failed: dict[str, dict] = {}
        self.rejected_parallel: dict[tuple[str, ...], float] = {}
        if self.path is not None and self.path.exists():
            data = json.loads(self.path.read_text())
            if data.get("version") != VERSION:
                raise ValueError(f"{self.path}: unsupported feedback version {data.get('version')!r}")
            self.failed = {e["pattern"]: e for e in data.get("failed_patterns", [])}
            self.rejected_parallel = {tuple(e["patterns"]): e["gain_s"]
                                      for e in data.get("rejected_parallel", [])}

    def forbidden(self) -> frozenset[str]:
        return frozenset(self.failed)

    def record_failure(self, pattern: str, reason: str, ops: list[str]) -> None:
        self.failed[pattern] = {"pattern": pattern, "reason": reason, "ops": ops}

    def record_rejected_parallel(self, patterns: tuple[str, ...], gain_s: float) -> None:
        self.rejected_parallel[tuple(patterns)] = gain_s

    def save(self) -> None:
        if self.path is None:
            return
        data = {"version": VERSION,
                "failed_patterns": list(self.failed.values()),
                "rejected_parallel": [{"patterns": list(k), "gain_s": v}
                                      for k, v in self.rejected_parallel.items()]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(self.path)

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
import warnings
from pathlib import Path

VERSION = 1


class FeedbackStore:
    """Failed patterns and rejected parallel compositions; persisted when ``path`` is given."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self.failed: dict[str, dict] = {}
        self.rejected_parallel: dict[tuple[str, ...], float] = {}
        if self.path is not None and self.path.exists():
            try:
                content = _parse(json.loads(self.path.read_text()))
            except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
                content = str(err)
            if isinstance(content, str):
                warnings.warn(f"{self.path}: corrupt APOLLO feedback file ignored ({content}); it is "
                              "rewritten when this run saves its feedback", stacklevel=2)
            else:
                self.failed, self.rejected_parallel = content

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


def _parse(data) -> tuple[dict, dict] | str:
    """``(failed, rejected_parallel)`` of a feedback file's JSON, or what is wrong with it."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        return f"unsupported feedback version {version!r}, expected {VERSION}"
    for key in ("failed_patterns", "rejected_parallel"):
        if not isinstance(data.get(key, []), list):
            return f"{key} is not a list"
    failed, rejected = {}, {}
    for i, e in enumerate(data.get("failed_patterns", [])):
        if not (isinstance(e, dict) and isinstance(e.get("pattern"), str)
                and isinstance(e.get("reason", ""), str) and isinstance(e.get("ops", []), list)):
            return f"failed_patterns[{i}] is not {{pattern: str, reason: str, ops: [str]}}"
        failed[e["pattern"]] = {"pattern": e["pattern"], "reason": e.get("reason", ""),
                                "ops": [str(op) for op in e.get("ops", [])]}
    for i, e in enumerate(data.get("rejected_parallel", [])):
        patterns = e.get("patterns") if isinstance(e, dict) else None
        gain = e.get("gain_s") if isinstance(e, dict) else None
        if not (isinstance(patterns, list) and all(isinstance(p, str) for p in patterns)
                and isinstance(gain, (int, float)) and not isinstance(gain, bool)):
            return f"rejected_parallel[{i}] is not {{patterns: [str], gain_s: number}}"
        rejected[tuple(patterns)] = float(gain)
    return failed, rejected

"""Benchmark scripts' results written into a marked section of a Markdown file (docs/benchmarks.md),
leaving the hand-written text around the markers alone."""

from __future__ import annotations

import os


def replace_section(path: str, section: str, begin: str, end: str) -> None:
    """Replace the text from ``begin`` to ``end`` (both included; ``section`` starts and ends with
    them) in ``path``, or append ``section`` where the markers are missing."""
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)

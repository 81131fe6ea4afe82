"""Small IRModule helpers shared by the module passes."""

from __future__ import annotations

import tvm


def with_functions(mod: tvm.IRModule, updates: dict) -> tvm.IRModule:
    """A copy of ``mod`` with ``updates`` (GlobalVar -> function) applied, or ``mod`` itself when
    there are none: a pass never modifies its caller's module in place."""
    if not updates:
        return mod
    mod = mod.clone()
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod

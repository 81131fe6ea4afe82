"""One backend per target family, looked up by target key (the role of TVM's
``python/tvm/relax/backend/<target>/pipeline.py`` modules and ``get_default_pipeline(target)``).

A backend gives the target-specific passes of every pipeline of
:mod:`tvm_fusion_ext.pipelines.phases`: ``graph_passes(target)`` (graph simplifications on
high-level Relax, run before every strategy's own pre-processing), ``schedule_passes(target,
policy)`` (TIR scheduling for one of :data:`POLICIES`) and ``lowering_passes(target)`` (dataflow
lowering and finalisation). A module per family registers its backend with
:func:`register_backend` under a target key (``"cpu"``, ``"cuda"``, ``"dsa"``); :func:`backend_for`
picks the first of a target's keys that has one, so a target whose keys are ``["dsa", "cpu"]`` gets
the DSA backend.
"""

from __future__ import annotations

from typing import Protocol

import tvm

# The scheduling policies every backend implements.
POLICIES = ("unscheduled", "untuned", "tuned")


class Backend(Protocol):
    def graph_passes(self, target: tvm.target.Target) -> list:
        """Simplifications of high-level Relax for ``target``, shared by every strategy."""

    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        """TIR scheduling of ``policy`` (one of :data:`POLICIES`) for ``target``."""

    def lowering_passes(self, target: tvm.target.Target) -> list:
        """Dataflow lowering and finalisation of the scheduled module for ``target``."""


_BACKENDS: dict[str, Backend] = {}


def register_backend(key: str):
    """Class decorator: an instance of the class is the backend of targets with key ``key``.
    Registering a key again replaces its backend."""

    def _register(cls):
        _BACKENDS[key] = cls()
        return cls

    return _register


def backend_for(target: tvm.target.Target) -> Backend:
    """The backend of the first of ``target``'s keys that has one; a ``ValueError`` otherwise."""
    for key in target.keys:
        if key in _BACKENDS:
            return _BACKENDS[key]
    raise ValueError(f"target kind {target.kind.name!r} (keys {', '.join(target.keys)}): the fusion "
                     f"pipelines schedule and lower only for targets with a backend (keys "
                     f"{', '.join(_BACKENDS)})")

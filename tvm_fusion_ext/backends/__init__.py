"""Target backends: the scheduling and lowering phases of every pipeline, one module per target
family (:mod:`.registry` explains the lookup). A new family is a module here that registers its
backend with :func:`~.registry.register_backend`, imported below."""

from . import cpu, cuda, dsa  # noqa: F401  (register the "cpu", "cuda" and "dsa" backends)
from .registry import POLICIES, Backend, backend_for, register_backend

__all__ = ["POLICIES", "Backend", "backend_for", "register_backend"]

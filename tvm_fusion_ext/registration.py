"""Registration conventions shared by every pass and pipeline of the package.

* A pass is a Python class usable in a ``tvm.transform.Sequential``; :func:`register_pass` also
  exposes its constructor as the global function ``tvm_fusion_ext.<PassName>`` so tools that look
  passes up by name find it.
* A named Relax pipeline is registered under ``tvm_fusion_ext.<name>`` in TVM's pipeline map, so
  ``tvm.compile(mod, target, relax_pipeline="tvm_fusion_ext.<name>")`` works.

Both are idempotent: importing (or reloading) the package twice never raises.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax

PREFIX = "tvm_fusion_ext"


def register_pass(cls):
    """Class decorator: register ``cls``'s constructor as global function ``tvm_fusion_ext.<name>``.

    FFI global functions take positional arguments only, so the registered function forwards its
    positional arguments to the constructor.
    """
    name = getattr(cls, "__name__", None) or cls.info.name

    def _construct(*args):
        return cls(*args)

    tvm.register_global_func(f"{PREFIX}.{name}", _construct, override=True)
    return cls


def register_relax_pipeline(name: str, factory: Callable[[], tvm.transform.Pass]) -> str:
    """Register ``factory`` (called with no arguments, under ``with target``) as a Relax pipeline.

    Returns the full registered name ``tvm_fusion_ext.<name>``. Re-registration replaces the
    previous entry instead of raising, so reloading the package is safe.
    """
    full = f"{PREFIX}.{name}"
    pipeline_map = relax.pipeline.PIPELINE_MAP
    if full in pipeline_map:
        pipeline_map[full] = factory
    else:
        relax.register_pipeline(full)(factory)
    return full

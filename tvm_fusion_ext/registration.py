"""Registration of passes, the one registration every pass module needs.

A pass is a Python class usable in a ``tvm.transform.Sequential``; :func:`register_pass` also
exposes its constructor as the global function ``tvm_fusion_ext.<PassName>`` so tools that look
passes up by name find it. Named pipelines are registered by
:mod:`tvm_fusion_ext.pipelines.registration`, a layer above the passes. Registration is
idempotent: importing (or reloading) the package twice never raises.
"""

from __future__ import annotations

import tvm

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

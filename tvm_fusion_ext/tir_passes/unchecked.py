"""``s_tir.Schedule`` primitives without their Python argument checks, while the default schedule
runs (:func:`unchecked_primitives`).

Every primitive of ``s_tir.Schedule`` (``python/tvm/s_tir/schedule/schedule.py``) is wrapped by
``_type_checker.type_checked``, which binds each argument to the signature and checks it against
the type hints in Python before the FFI call. The rules of this package call primitives tens of
thousands of times per model (the profitability check of :mod:`tvm_fusion_ext.cost` schedules
every candidate group), and the checks were a third of that time (under cProfile, 5.6 s of the
17 s a NeoFlow compile of MobileNetV2 spent predicting kernels). The primitives themselves, in
C++, still validate what they are given: a wrong argument raises there instead.
"""

from __future__ import annotations

import contextlib
import inspect
import threading

from tvm import s_tir


class _UncheckedPrimitives:
    """Swaps the checked primitives of ``s_tir.Schedule`` for the functions they wrap while at
    least one caller (of any thread) is inside :meth:`scope`, and back when the last one leaves."""

    def __init__(self):
        self.checked = {name: attr for name, attr in vars(s_tir.Schedule).items()
                        if inspect.isfunction(attr) and inspect.isfunction(getattr(attr, "__wrapped__", None))}
        self.lock = threading.Lock()
        self.depth = 0

    @contextlib.contextmanager
    def scope(self):
        with self.lock:
            if self.depth == 0:
                for name, checked in self.checked.items():
                    setattr(s_tir.Schedule, name, checked.__wrapped__)
            self.depth += 1
        try:
            yield
        finally:
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    for name, checked in self.checked.items():
                        setattr(s_tir.Schedule, name, checked)


_UNCHECKED = _UncheckedPrimitives()


def unchecked_primitives():
    """Context in which ``s_tir.Schedule``'s primitives skip their Python type checks (module
    docstring); nested and concurrent uses are fine."""
    return _UNCHECKED.scope()

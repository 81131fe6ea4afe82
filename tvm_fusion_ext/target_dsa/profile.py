"""``profile``: run a DSA executable on the host and simulate it on the DSA (docs/dsa.md, "Profile").

The relax VM runs the executable on concrete inputs with an instrument that records every kernel
call; the kernel models embedded in the generated C (:mod:`.codegen`) and the simulator
(:mod:`.simulator`) turn that call sequence into the profile ``tvm-fusion compare`` reports under
``"dsa"``.

:func:`tvm_fusion_ext.driver.static_profile.static_profile` simulates the same models without
running the executable.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .codegen import kernel_models
from .simulator import simulate
from .target import spec_of_target

PROFILE_KEYS = ("kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers", "movement_bytes", "cycles",
                "time_ms", "unit_busy")


def run_with_trace(executable, inputs, func_name: str = "main", models: dict | None = None):
    """``(outputs, kernel symbols called in order, kernel models)`` of one run of ``func_name``.

    ``models`` defaults to those embedded in the executable's C source; a library loaded back from
    ``export_library`` has no source, so its caller passes the models saved beside it.
    """
    models = kernel_models(executable) if models is None else models
    vm = relax.VirtualMachine(executable, tvm.cpu())
    calls: list[str] = []

    def _instrument(_func, symbol, before_run, _ret, *_args):
        if before_run and str(symbol) in models:
            calls.append(str(symbol))
        return 0

    vm.set_instrument(_instrument)
    args = [x if isinstance(x, tvm.runtime.Tensor) else tvm.runtime.tensor(np.asarray(x))
            for x in inputs]
    result = vm[func_name](*args)
    return result, calls, models


def profile_details(executable_or_mod, inputs, target, func_name: str = "main",
                    models: dict | None = None) -> dict:
    """The full simulation: the profile keys plus ``per_kernel`` cycles and bytes."""
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    spec = spec_of_target(target)
    executable = executable_or_mod
    if isinstance(executable_or_mod, tvm.IRModule):
        # the pipeline ``tvm_fusion_ext.stock`` (registered when the package is imported)
        executable = tvm.compile(executable_or_mod, target=target, relax_pipeline="tvm_fusion_ext.stock")
    _, calls, models = run_with_trace(executable, inputs, func_name, models)
    return simulate(models, calls, spec)


def profile(executable_or_mod, inputs, target, func_name: str = "main") -> dict:
    """``{"kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers", "cycles", "time_ms",
    "unit_busy"}`` of running ``executable_or_mod`` (an IRModule is compiled with ``stock``)."""
    details = profile_details(executable_or_mod, inputs, target, func_name)
    return {key: details[key] for key in PROFILE_KEYS}

"""``profile``: run a DSA executable on the host and simulate it on the DSA (issue 7, item 4).

The relax VM runs the executable on concrete inputs with an instrument that records every kernel
call; the kernel models embedded in the generated C (:mod:`.codegen`) and the simulator
(:mod:`.simulator`) turn that call sequence into the profile ``tvm-fusion compare`` reports under
``"dsa"``.

:func:`static_profile` simulates without running: it stops the pipeline after scheduling, reads
each kernel's model from its PrimFunc and the kernel calls from ``main``'s bindings (a static
graph calls each ``call_tir`` once, in order), so large batches are simulated without computing
them on the host. The same models and simulator give the same numbers as :func:`profile`.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .codegen import kernel_models
from .simulator import simulate
from .target import spec_of_target

PROFILE_KEYS = ("kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers", "cycles", "time_ms",
                "unit_busy")


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
        from ..pipelines import pipeline

        executable = tvm.compile(executable_or_mod, target=target,
                                 relax_pipeline=pipeline("stock", target))
    _, calls, models = run_with_trace(executable, inputs, func_name, models)
    return simulate(models, calls, spec)


def static_profile(mod: tvm.IRModule, fusion: str, target, policy: str = "untuned",
                   func_name: str = "main") -> dict:
    """:func:`profile_details` of ``mod`` compiled through strategy ``fusion``, without running it:
    the kernel calls are ``func_name``'s ``call_tir`` bindings (static shapes, no control flow)."""
    import json

    from ..pipelines import fusion_pipeline, schedule_passes
    from .pipeline import MODEL_ATTR

    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    with target:
        scheduled = tvm.transform.Sequential(
            [fusion_pipeline(fusion, target), *schedule_passes(target, policy)])(mod)
    models = {gv.name_hint: json.loads(str(f.attrs[MODEL_ATTR]))
              for gv, f in scheduled.functions_items()
              if f.attrs is not None and MODEL_ATTR in f.attrs}
    calls = []
    call_tir = (tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.call_tir_inplace"))
    for block in scheduled[func_name].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and any(value.op.same_as(op) for op in call_tir):
                name = value.args[0].name_hint
                if name not in models:
                    raise ValueError(f"kernel {name} has no DSA kernel model")
                calls.append(name)
    return simulate(models, calls, spec_of_target(target))


def profile(executable_or_mod, inputs, target, func_name: str = "main") -> dict:
    """``{"kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers", "cycles", "time_ms",
    "unit_busy"}`` of running ``executable_or_mod`` (an IRModule is compiled with ``stock``)."""
    details = profile_details(executable_or_mod, inputs, target, func_name)
    return {key: details[key] for key in PROFILE_KEYS}

"""``static_profile``: the DSA simulator's profile of a model compiled through a strategy, without
running it (docs/dsa.md, "Cycles").

The pipeline stops after scheduling; each kernel's model is read from its PrimFunc
(:data:`tvm_fusion_ext.target_dsa.pipeline.MODEL_ATTR`) and the kernel calls from ``main``'s
bindings (a static graph calls each ``call_tir`` once, in order), so large batches are simulated
without computing them on the host. The same models and simulator give the same numbers as
:func:`tvm_fusion_ext.target_dsa.profile.profile_details` of the compiled executable.
"""

from __future__ import annotations

import json

import tvm
from tvm import relax

from ..pipelines import fusion_pipeline, schedule_passes
from ..target_dsa.pipeline import MODEL_ATTR
from ..target_dsa.simulator import simulate
from ..target_dsa.target import spec_of_target


def static_profile(mod: tvm.IRModule, fusion: str, target, policy: str = "untuned",
                   func_name: str = "main", cost_check: bool = True) -> dict:
    """``profile_details`` of ``mod`` compiled through strategy ``fusion``, without running it:
    the kernel calls are ``func_name``'s ``call_tir`` bindings (static shapes, no control flow).
    ``cost_check`` as for :func:`~tvm_fusion_ext.pipelines.fusion_pipeline`."""
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    with target:
        scheduled = tvm.transform.Sequential(
            [fusion_pipeline(fusion, target, cost_check), *schedule_passes(target, policy)])(mod)
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

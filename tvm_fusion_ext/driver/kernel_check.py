"""Kernel-by-kernel differential check of a strategy's build: every scheduled kernel, run alone on
random inputs on the target's device, against the same kernel before scheduling (as the strategy's
fusion stage made it) compiled for the host CPU. Where a whole model's outputs disagree, this names
the kernel whose schedule is wrong (``scripts/check_kernels.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx

from ..tir_passes.gpu_rules import written_params
from .build import build_with_phases, max_rel_error, random_array, target_device
from .kernel_times import called_kernels


@dataclass(frozen=True)
class KernelCheck:
    """One kernel: its name (after scheduling), the largest error of its outputs relative to each
    output's largest magnitude, and the failure when it did not build or run."""

    name: str
    rel_error: float | None
    failure: str = ""


def check_kernels(mod: tvm.IRModule, fusion: str, target: tvm.target.Target, seed: int = 0,
                  policy: str = "untuned") -> list[KernelCheck]:
    """Every kernel ``fusion``'s build of ``mod`` for ``target`` calls, checked alone (see the
    module docstring). Integer inputs are drawn from {0, 1}, valid indices for any gather."""
    _, fused_mod, scheduled_mod = build_with_phases(mod, fusion, target, policy)
    device = target_device(target)
    pairs = dict(zip(called_kernels(scheduled_mod), called_kernels(fused_mod)))
    rng = np.random.default_rng(seed)
    results = []
    for scheduled_name, fused_name in pairs.items():
        scheduled, reference = scheduled_mod[scheduled_name], fused_mod[fused_name]
        try:
            results.append(KernelCheck(scheduled_name, compare_kernel(scheduled, reference, target, device, rng)))
        except Exception as err:  # noqa: BLE001 - report the kernel and go on with the next
            results.append(KernelCheck(scheduled_name, None, f"{type(err).__name__}: {str(err).splitlines()[0]}"))
    return results


def compare_kernel(scheduled: tirx.PrimFunc, reference: tirx.PrimFunc, target, device, rng) -> float:
    """The largest relative error of ``scheduled`` on ``target`` against ``reference`` on the host
    CPU, on the same random inputs (integers drawn from {0, 1})."""
    buffers = list(reference.params)
    outputs = {i for i, param in enumerate(buffers) if any(param.same_as(w) for w in written_params(reference))}
    shapes = [[int(d) for d in buf.shape] for buf in buffers]
    arrays = [np.zeros(shape, buf.dtype) if i in outputs else random_array(rng, shape, buf.dtype, int_high=2)
              for i, (buf, shape) in enumerate(zip(buffers, shapes))]
    expected = _run(reference, "llvm", tvm.cpu(), arrays)
    actual = _run(scheduled, target, device, arrays)
    return max_rel_error([actual[i] for i in sorted(outputs)], [expected[i] for i in sorted(outputs)])


def _run(func: tirx.PrimFunc, target, device, arrays) -> list[np.ndarray]:
    lib = tvm.compile(tvm.IRModule({"kernel": func.with_attr("global_symbol", "kernel")}), target=target)
    args = [tvm.runtime.tensor(a, device) for a in arrays]
    lib["kernel"](*args)
    device.sync()
    return [a.numpy() for a in args]

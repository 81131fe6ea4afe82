"""Host wall time per kernel of a compiled model, through the relax VM's instrument hook, and the
floating-point work of each kernel read off its TIR (for achieved-GFLOP/s tables)."""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..tir_passes.analysis import analyze_blocks

BUILTIN_PREFIX = "vm.builtin."
BUILTINS = "(relax VM builtins)"
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@dataclass(frozen=True)
class KernelTime:
    name: str
    calls_per_run: float
    ms_per_run: float


def kernel_times(vm, args, device, runs: int = 10) -> list[KernelTime]:
    """Wall time of every kernel per run of ``vm["main"](*args)``, averaged over ``runs`` runs,
    slowest first. Each call is synchronised, so asynchronous devices are timed too; the VM's own
    builtins (allocation, shape checks) are one entry, :data:`BUILTINS`."""
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    started: list[float] = []

    def instrument(_func, symbol, before_run, _ret, *_args):
        if before_run:
            started.append(time.perf_counter())
        else:
            device.sync()
            name = BUILTINS if str(symbol).startswith(BUILTIN_PREFIX) else str(symbol)
            totals[name] += time.perf_counter() - started.pop()
            calls[name] += 1
        return 0

    vm.set_instrument(instrument)
    try:
        for _ in range(runs):
            vm["main"](*args)
    finally:
        vm.set_instrument(None)
    ranked = sorted(totals, key=totals.get, reverse=True)
    return [KernelTime(name, calls[name] / runs, totals[name] * 1e3 / runs) for name in ranked]


# A CUDA kernel definition (not its forward declaration) in TVM's generated source; TVM names the device kernels of PrimFunc
# ``f`` ``f_kernel``, ``f_kernel_1``, ... (``src/tir/transform/split_host_device.cc``).
CUDA_KERNEL_HEAD = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\([^)]*\) \{')
_DEVICE_KERNEL_NAME = re.compile(r"(\w+)_kernel(?:_\d+)?")


def device_sources(executable, kind: str = "cuda") -> str:
    """The generated source of every ``kind`` module an executable imports, concatenated."""
    def modules(mod):
        yield mod
        for sub in mod.imports:
            yield from modules(sub)

    return "\n".join(m.inspect_source() for m in modules(executable.mod) if m.kind == kind)


def device_kernels(executable) -> dict[str, int]:
    """PrimFunc name -> how many CUDA kernels it launches, read off the executable's CUDA source."""
    counts: dict[str, int] = defaultdict(int)
    for name in CUDA_KERNEL_HEAD.findall(device_sources(executable)):
        match = _DEVICE_KERNEL_NAME.fullmatch(name)
        counts[match.group(1) if match else name] += 1
    return dict(counts)


def launches_per_run(vm, args, device, executable) -> int:
    """CUDA kernels launched by one run of ``vm["main"](*args)``: the PrimFuncs it calls, each
    counted as many times as it has device kernels."""
    per_func = device_kernels(executable)
    return round(sum(entry.calls_per_run * per_func.get(entry.name, 0)
                     for entry in kernel_times(vm, args, device, runs=1)))


def called_kernels(mod: tvm.IRModule, func: str = "main") -> list[str]:
    """Names of the PrimFuncs ``mod[func]`` calls with ``call_tir``, in call order."""
    names = []
    tvm_ffi.structural_walk(mod[func].body, [(relax.Call, lambda call: names.append(
        call.args[0].name_hint) if call.op.same_as(_CALL_TIR) else None)], order="pre")
    return names


def contractions(mod: tvm.IRModule) -> dict[str, tuple[int, str]]:
    """``(flops, class)`` of every PrimFunc of ``mod`` (before scheduling) with a contraction, by
    function name: the floating-point operations of its contractions and the class of the
    largest one (:func:`contraction_class`)."""
    found = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        analyzed = analyze_blocks(s_tir.Schedule(func), skip_loopless=True) or []
        blocks = [info for _, info in analyzed if info.is_contraction]
        if blocks:
            largest = max(blocks, key=lambda info: math.prod(info.extents))
            found[gvar.name_hint] = (sum(2 * math.prod(info.extents) for info in blocks),
                                     contraction_class(largest))
    return found


def contraction_class(info) -> str:
    """``"matmul"``, ``"depthwise conv"``, ``"1x1 conv"`` or ``"KxK conv"`` (K x K window) of a
    contraction block: an NCHW conv's reductions are (input channels per group, window rows,
    window columns), an NHWC conv's (window rows, window columns, input channels per group); a
    depthwise conv has one input channel per group."""
    if "conv" not in info.name:
        return "matmul"
    reduced = [info.extents[pos] for pos in info.reduce_positions]
    if "nhwc" in info.name and len(reduced) == 3:
        reduced = reduced[2:] + reduced[:2]
    window = reduced[1:] if len(reduced) == 3 else reduced[-2:]
    if len(reduced) == 3 and reduced[0] == 1:
        return "depthwise conv"
    if math.prod(window) == 1:
        return "1x1 conv"
    return "x".join(str(k) for k in window) + " conv"

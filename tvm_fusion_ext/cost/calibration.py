"""Calibration of the kernel cost model (:mod:`.model`) on this host, cached once per machine.

A handful of tiny kernels, each made by the same schedule rules the pipelines use and timed with
``time_evaluator``, pin down one constant of :class:`~.model.Rates` each, in order (every later
kernel's other terms are predicted with the constants already found):

1. ``launch``: one more ``call_tir`` in the Relax VM (NeoFlow's ``L``,
   :func:`~tvm_fusion_ext.hardware.device_costs.measure_launch`);
2. ``bandwidth``: adding one to a buffer larger than the last-level cache (memory bound);
3. ``vector``: a degree-:data:`POLY_DEGREE` polynomial per element of an L2-sized buffer,
   vectorised on one core (the plain schedule with one core);
4. ``parallel``: the same kernel vectorised and parallel (the plain schedule of the host);
5. ``scalar``: the same kernel as written (serial, no vector loop);
6. ``reduce``: a matmul under the plain schedule (parallel rows, scalar accumulation along ``k``);
7. ``tiled``: the same matmul under the default schedule (register tile, GraphTurbo section 4.1).

It takes a few seconds. The result is cached as JSON in ``kernel_costs.json`` of the package's
cache directory (:func:`~tvm_fusion_ext.hardware.device_costs.cache_dir`: ``TVM_FUSION_EXT_CACHE``
or ``~/.cache/tvm_fusion_ext``, where NeoFlow's device constants live too) under the host's key
(:func:`~tvm_fusion_ext.hardware.device_costs.host_key`). A missing entry is calibrated; a file
that cannot be read or parsed gives one warning, is calibrated again and rewritten.
``tvm-fusion calibrate`` (or :func:`load_or_calibrate` with ``refresh=True``) measures again.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import te, tirx

from ..hardware.device_costs import cache_dir, host_key, measure_launch
from ..hardware.spec import CPUSpec, spec_for_target
from ..tir_passes.plain_schedule import PlainSchedule
from .features import kernel_features
from .model import Rates, predict_nests, scheduled

CACHE_FILE = "kernel_costs.json"
VERSION = 1
POLY_DEGREE = 32  # multiply-adds per element of the arithmetic kernels
POLY_ELEMENTS = 64 * 1024
GEMM_SIZE = 192
MIN_REPEAT_MS = 40
REPEATS = 3

# Rates this process has read or measured, by cache file and host: later compiles do not read
# the file again.
_LOADED: dict[tuple[str, str], Rates] = {}


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def load_or_calibrate(refresh: bool = False) -> Rates:
    """This host's :class:`Rates`: from this process, else from the cache file, else measured by
    :func:`calibrate` (and written to the file); ``refresh`` measures again."""
    path = cache_path()
    key = host_key()
    if not refresh and (str(path), key) in _LOADED:
        return _LOADED[(str(path), key)]
    entries = _read(path)
    rates = None
    if not refresh and key in entries:
        try:
            rates = Rates.from_json(entries[key])
        except ValueError as err:
            warnings.warn(f"{path}: corrupt kernel-cost calibration ignored ({err}); calibrating "
                          "again", stacklevel=2)
    if rates is None:
        rates = calibrate()
        entries[key] = rates.to_json()
        _write(path, entries)
    _LOADED[(str(path), key)] = rates
    return rates


def save_rates(rates: Rates) -> None:
    """Make ``rates`` this host's calibration (in the cache file and this process)."""
    path = cache_path()
    entries = _read(path)
    entries[host_key()] = rates.to_json()
    _write(path, entries)
    _LOADED[(str(path), host_key())] = rates


def forget_loaded() -> None:
    """Drop the rates this process has loaded (the next :func:`load_or_calibrate` reads the file)."""
    _LOADED.clear()


def _read(path: Path) -> dict:
    """The file's entries by host key; ``{}`` (with one warning) when it cannot be used."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(
                data.get("hosts"), dict):
            raise ValueError(f"expected {{'version': {VERSION}, 'hosts': {{...}}}}")
        return dict(data["hosts"])
    except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
        warnings.warn(f"{path}: corrupt kernel-cost calibration ignored ({err}); calibrating again "
                      "and rewriting it", stacklevel=3)
        return {}


def _write(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": VERSION, "hosts": entries}, indent=1, sort_keys=True))
    tmp.replace(path)


def calibrate() -> Rates:
    """Measure :class:`Rates` on this host with the kernels of the module docstring, compiled for
    this host's CPU (its ``mcpu``, as ``tvm-fusion`` compiles for a bare ``llvm``)."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()})
    spec = spec_for_target(target)
    llc = spec.l3_bytes if isinstance(spec, CPUSpec) else spec.fast_memory_bytes
    one_core = PlainSchedule(dataclasses.replace(spec, num_cores=1))
    poly = _polynomial(POLY_ELEMENTS)
    gemm = _matmul(GEMM_SIZE)

    # Constants not measured yet are "infinitely fast": they add nothing to earlier kernels.
    fast = 1e30
    rates = Rates(launch=measure_launch(target), bandwidth=fast, parallel=1.0, tiled=fast,
                  reduce=fast, vector=fast, scalar=fast)
    big = _add_one(max(llc, 1 << 20))  # 4 bytes read + 4 written per element: 8x the LLC
    rates = _solve(rates, "bandwidth", _by_rule(big, target, None), target)
    rates = _solve(rates, "vector", _by_rule(poly, target, one_core), target)
    rates = _solve(rates, "parallel", _by_rule(poly, target, PlainSchedule()), target)
    rates = _solve(rates, "scalar", poly, target)
    rates = _solve(rates, "reduce", _by_rule(gemm, target, PlainSchedule()), target)
    return _solve(rates, "tiled", _by_rule(gemm, target, None), target)


def _solve(rates: Rates, name: str, func: tirx.PrimFunc, target) -> Rates:
    """``rates`` with ``name`` set so that the model predicts ``func``'s measured time.

    The constant's term is isolated: with the constant at 1 and at 2 the prediction is
    ``other + term`` and ``other + term / 2`` (every term is proportional to 1 / constant, or to
    it for ``parallel``'s reciprocal), so ``term = 2 * (p1 - p2)`` and the measured time minus
    ``other`` gives the constant.
    """
    nests = kernel_features(func, spec_for_target(target))
    measured = _time(func, target)
    p1 = predict_nests(nests, _with(rates, name, 1.0))
    p2 = predict_nests(nests, _with(rates, name, 2.0))
    term = 2.0 * (p1 - p2)
    other = p1 - term
    if term <= 0:
        raise RuntimeError(f"calibration kernel for {name} does not depend on it")
    value = term / max(measured - other, 1e-9)
    if name == "parallel":
        cores = spec_for_target(target).num_cores
        if cores > 1 and value < 1.0:
            warnings.warn(_serial_parallel_warning(value), stacklevel=3)
        value = min(max(value, 1.0), float(cores))
    return _with(rates, name, value)


def _serial_parallel_warning(speedup: float) -> str:
    """Why the parallel kernel gained nothing, for the warning of :func:`_solve`: TVM's thread pool
    (started by the kernel) runs one thread in this process, or the machine was busy."""
    threads = int(tvm.get_global_func("runtime.NumThreads")())
    cause = ("TVM's thread pool runs one thread in this process (TVM_NUM_THREADS unset: TVM takes half "
             "the logical CPUs)" if threads == 1 else f"on {threads} threads it ran {speedup:.2f}x one "
             "thread's speed: was the machine busy?")
    return (f"calibration: parallel loops measured no faster than serial ones ({cause}); predictions "
            "take no gain from them. `tvm-fusion calibrate --threads N` measures again on N threads")


def _with(rates: Rates, name: str, value: float) -> Rates:
    data = rates.to_json()
    data[name] = value
    return Rates(**data)


def _by_rule(func: tirx.PrimFunc, target, rule) -> tirx.PrimFunc:
    """``func`` scheduled by ``rule`` (``None``: the default schedule)."""
    if rule is None:
        return scheduled(func, target)
    sch = rule.apply(func, target, False)
    if sch is None:
        raise RuntimeError(f"{type(rule).__name__} declined a calibration kernel")
    return sch.mod["main"]


def _time(func: tirx.PrimFunc, target) -> float:
    """Best mean seconds of one call, over :data:`REPEATS` repeats of at least ``MIN_REPEAT_MS``."""
    executable = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                             target=target)
    module = executable.jit() if hasattr(executable, "jit") else executable
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, [int(d) for d in p.shape]).astype(str(p.dtype)))
            for p in func.params]
    timer = module.time_evaluator("main", tvm.cpu(), number=1, repeat=REPEATS,
                                  min_repeat_ms=MIN_REPEAT_MS)
    return float(min(timer(*args).results))


def _add_one(elements: int) -> tirx.PrimFunc:
    a = te.placeholder((elements,), "float32", name="A")
    b = te.compute((elements,), lambda i: a[i] + tirx.const(1.0, "float32"), name="B")
    return te.create_prim_func([a, b])


def _polynomial(elements: int) -> tirx.PrimFunc:
    a = te.placeholder((elements,), "float32", name="A")

    def horner(i):
        x = a[i]
        y = x
        for k in range(POLY_DEGREE):
            y = y * x + tirx.const(0.5 / (k + 1), "float32")
        return y

    b = te.compute((elements,), horner, name="B")
    return te.create_prim_func([a, b])


def _matmul(n: int) -> tirx.PrimFunc:
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c])

"""Pd, Pc and L of NeoFlow's fusion reward (neoflow-training-compilation section 5.1, Eq. (4)),
measured on this machine and cached per machine.

NeoFlow's reward divides the data-transfer and computation saved by a fusion by the device's peak
off-chip bandwidth ``Pd`` and peak arithmetic rate ``Pc`` and adds ``L`` per kernel launch saved;
"Pd, Pc, and L are device-specific and can be measured using benchmarks". The benchmarks here:

* ``Pd``: copying a buffer four times the last-level cache (so it streams from DRAM), bytes
  read + written per second, best of several runs;
* ``Pc``: a float32 GEMM through numpy's BLAS (the reward wants an optimistic peak, not what an
  untuned TVM kernel reaches), 2*M*N*K per second;
* ``L``: the Relax VM's cost of one more ``call_tir`` of a 1-element kernel: a function with 1 and
  one with ``1 + LAUNCH_EXTRA`` such calls, timed, difference divided by ``LAUNCH_EXTRA``.

The benchmarks time the host (numpy and the Relax VM on the CPU), so a GPU target
(:class:`~.spec.GPUSpec`) takes its constants from its spec's datasheet peaks instead
(:func:`datasheet_costs`), measured nowhere and cached nowhere.

Sizes come from the :mod:`.spec` of the target (cache sizes), never literals in passes. Results are
cached as JSON in ``~/.cache/tvm_fusion_ext/device_costs.json`` (override the directory with
``TVM_FUSION_EXT_CACHE``) under a key naming the host CPU and the target; ``scripts/measure_device.py``
measures (again) and prints them.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm

from .spec import CPUSpec, GPUSpec, spec_for_target

CACHE_ENV = "TVM_FUSION_EXT_CACHE"
CACHE_FILE = "device_costs.json"
LAUNCH_EXTRA = 32  # extra tiny kernels timed to isolate one launch
GEMM_SIZE = 512  # square float32 GEMM for Pc
REPEATS = 5


@dataclass(frozen=True)
class DeviceCosts:
    """NeoFlow's device constants: ``Pd`` bytes/s, ``Pc`` FLOP/s, ``L`` seconds per launch."""

    bandwidth: float
    flops: float
    launch: float
    source: str = "given"

    def reward(self, delta_bytes: float, delta_flops: float, delta_kernels: float) -> float:
        """Eq. (4): ``R = dT/Pd + dC/Pc + dK*L`` in seconds saved (negative: time added)."""
        return delta_bytes / self.bandwidth + delta_flops / self.flops + delta_kernels * self.launch


def cache_dir() -> Path:
    """The package's cache directory: ``TVM_FUSION_EXT_CACHE``, else ``~/.cache/tvm_fusion_ext``."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "tvm_fusion_ext"))


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def machine_key(target: tvm.target.Target) -> str:
    """Which machine and target a measurement belongs to."""
    return f"{host_key()}|{json.dumps(dict(target.export()), sort_keys=True, default=str)}"


def host_key() -> str:
    """Which machine a measurement belongs to: host name and CPU model."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}|{cpu}"


def load_or_measure(target: tvm.target.Target | str | None = None, refresh: bool = False
                    ) -> DeviceCosts:
    """The cached costs of this machine and target, measuring (and caching) them if missing; a
    GPU target's :func:`datasheet_costs`."""
    target = _as_target(target)
    spec = spec_for_target(target)
    if isinstance(spec, GPUSpec):
        return datasheet_costs(spec)
    key = machine_key(target)
    path = cache_path()
    cache = {}
    if path.exists():
        try:
            cache = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            cache = {}
    if not refresh and key in cache:
        entry = cache[key]
        return DeviceCosts(entry["bandwidth"], entry["flops"], entry["launch"], source=str(path))
    costs = measure(target)
    cache[key] = asdict(costs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache, indent=1))
    tmp.replace(path)
    return costs


def datasheet_costs(spec: GPUSpec) -> DeviceCosts:
    """Pd, Pc and L of a GPU from its spec (peak DRAM bandwidth, float32 peak, launch cost)."""
    return DeviceCosts(bandwidth=spec.dram_bandwidth, flops=spec.fp32_flops,
                       launch=spec.launch_seconds, source=f"datasheet {spec.name}")


def measure(target: tvm.target.Target | str | None = None) -> DeviceCosts:
    """Run the three benchmarks of the module docstring on this machine."""
    target = _as_target(target)
    spec = spec_for_target(target)
    llc = spec.l3_bytes if isinstance(spec, CPUSpec) else spec.fast_memory_bytes
    return DeviceCosts(bandwidth=measure_bandwidth(4 * llc), flops=measure_flops(GEMM_SIZE),
                       launch=measure_launch(target), source="measured")


def measure_bandwidth(nbytes: int) -> float:
    """Bytes moved per second by a large copy (read + write)."""
    src = np.ones(max(1, nbytes // 4), dtype="float32")
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(REPEATS))
    return 2.0 * src.nbytes / best


def measure_flops(n: int) -> float:
    """FLOP/s of an ``n``-cube float32 GEMM."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(REPEATS))
    return 2.0 * n ** 3 / best


def measure_launch(target: tvm.target.Target) -> float:
    """Seconds one extra ``call_tir`` of a 1-element kernel costs in the Relax VM."""
    from tvm import relax

    def tiny_chain(count: int):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1,), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = x
                for _ in range(count):
                    y = bb.emit(relax.op.add(y, relax.const(1.0, "float32")))
                out = bb.emit_output(y)
            bb.emit_func_output(out)
        ex = tvm.compile(bb.get(), target=target)
        return relax.VirtualMachine(ex, tvm.cpu())

    arg = tvm.runtime.tensor(np.zeros((1,), "float32"))
    times = []
    for count in (1, 1 + LAUNCH_EXTRA):
        vm = tiny_chain(count)
        timer = vm.time_evaluator("main", tvm.cpu(), number=200, repeat=REPEATS)
        times.append(min(timer(arg).results))
    return max(times[1] - times[0], 0.0) / LAUNCH_EXTRA


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return max(time.perf_counter() - start, 1e-9)


def _as_target(target) -> tvm.target.Target:
    if target is None:
        target = tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    return tvm.target.Target(target) if isinstance(target, (str, dict)) else target

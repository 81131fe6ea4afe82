"""Hardware spec objects: the one place where passes read hardware facts.

GraphTurbo (graphturbo-dsa-scheduling.txt section 4.1) sizes an anchor op's tile so that the tiled
tensors stay in the fastest memory a core owns (the local buffer, LB, on its DSA). The scheduling
passes therefore only need a few generic facts, which every spec provides:

* ``num_cores``: parallel compute units the outermost fused loop is spread over;
* ``vector_bytes``: SIMD width, for the innermost vectorised loop;
* ``fast_memory_bytes``: per-core memory a tile's working set must fit (L2 on a CPU, LB on a DSA);
* ``vector_registers``: how many vector registers a register tile may keep live, and the
  ``fma_units`` / ``load_units`` / ``fma_latency`` that the micro-kernel's cost model reads;
* :meth:`HardwareSpec.panel_bytes`: memory next to the registers (L1) for one micro-kernel's panels.

:class:`CPUSpec` fills them from the machine (``/sys`` cache sizes, affinity) and from the
``Target`` (``num-cores``, ``vector-width``, ``mcpu``/``mattr``). Other targets add their own
frozen spec class (e.g. clusters / cores / LB / GB for the DSA) and register a factory for a target
key with :func:`register_spec`; :func:`spec_for_target` dispatches on ``target.keys``.
:class:`GPUSpec` is registered for ``cuda`` targets (an SM is a core, a thread block's shared
memory is the fast memory a tile must fit).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import tvm

_SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class HardwareSpec:
    """Generic facts a schedule needs; concrete targets subclass this (frozen, hashable)."""

    name: str
    num_cores: int
    vector_bytes: int
    fast_memory_bytes: int
    vector_registers: int = 16
    # Pipeline of one core as a register micro-kernel sees it (class facts, not spec fields): FMA,
    # load and store units per cycle (full-width vectors) and the FMA latency, so ``fma_units *
    # fma_latency`` independent accumulators keep it busy. The defaults hold for x86 cores since
    # Haswell / Zen.
    fma_units: ClassVar[int] = 2
    load_units: ClassVar[int] = 2
    store_units: ClassVar[int] = 1
    fma_latency: ClassVar[int] = 4
    # Cycles to bring one 64-byte line from L2 into L1 (32 bytes per cycle on Zen and Skylake).
    line_fill_cycles: ClassVar[float] = 2.0
    # Cycles for the first line of each contiguous run of a walk whose every step jumps
    # ``prefetch_stride_bytes`` or more (a row of ``X[512, 784]``, 3136 bytes, per reduction
    # step; the run's other lines follow at ``line_fill_cycles``): beyond half a 4 KiB page the stride
    # prefetchers (which stop at page boundaries) do not run ahead of it. An 8 x 1 micro-kernel
    # reading such a line per step (8 FMAs) took 7.9-12 cycles per step on an Emerald Rapids core
    # (a 512 -> 128 matmul over 784 columns, 120-165 GFLOP/s on 2 cores), 4.5 by its loads alone;
    # shorter strides (an attention score matmul reading ``K^T`` a 512-byte row per step) are
    # prefetched.
    strided_line_cycles: ClassVar[float] = 8.0
    prefetch_stride_bytes: ClassVar[int] = 2048

    def vector_lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one vector register (at least 1)."""
        bits = tvm.runtime.DataType(dtype).bits
        return max(1, self.vector_bytes * 8 // max(bits, 8))

    def panel_bytes(self) -> int:
        """Memory the operand panels of one register micro-kernel should fit, i.e. the memory
        level nearest the registers (a CPU's L1). By default 1/16 of the fast memory."""
        return self.fast_memory_bytes // 16


@dataclass(frozen=True)
class CPUSpec(HardwareSpec):
    """A CPU: the fast memory a tile targets is the per-core L2 cache (GraphTurbo's LB)."""

    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 8 * 1024 * 1024

    @classmethod
    def from_target(cls, target: tvm.target.Target | None = None) -> CPUSpec:
        """Read core count, vector width and cache sizes from ``target`` and the host machine."""
        target = _as_target(target)
        caches = host_caches()
        l1 = caches.get(1, 32 * 1024)
        l2 = caches.get(2, 512 * 1024)
        cores = target.attrs.get("num-cores") if target is not None else None
        vector_bits = _vector_bits(target)
        return cls(
            name=f"cpu:{target.attrs.get('mcpu', 'generic') if target is not None else 'host'}",
            num_cores=int(cores) if cores else _host_cores(),
            vector_bytes=vector_bits // 8,
            fast_memory_bytes=l2,
            vector_registers=32 if vector_bits >= 512 else 16,
            l1_bytes=l1,
            l2_bytes=l2,
            l3_bytes=caches.get(3, 8 * 1024 * 1024),
        )

    def panel_bytes(self) -> int:
        """Half the L1 data cache (the rest holds the broadcast stream and accumulator spills)."""
        return self.l1_bytes // 2


@dataclass(frozen=True)
class GPUSpec(HardwareSpec):
    """An NVIDIA GPU: ``num_cores`` streaming multiprocessors (SMs); the fast memory a tile must
    fit is the shared memory one thread block may allocate; ``vector_bytes`` is one 128-bit
    (``float4``) load per thread."""

    shared_memory_per_sm: int = 228 * 1024
    # Statically declared ``__shared__`` arrays (what TVM's CUDA codegen emits) are capped at 48 KB
    # per block on every compute capability; only dynamic shared memory may use the rest.
    static_shared_memory_per_block: int = 48 * 1024
    l2_bytes: int = 50 * 1024 * 1024
    max_threads_per_block: int = 1024
    warp_size: int = 32
    # Peaks for NeoFlow's reward (:mod:`.device_costs`): DRAM bytes/s, float32 FLOP/s without
    # tensor cores, and seconds per kernel launch.
    dram_bandwidth: float = 3.35e12
    fp32_flops: float = 67e12
    launch_seconds: float = 5e-6
    # Threads one SM keeps resident (how many serial per-thread loops run at once) and the SM
    # clock (what a cycle of a dependent chain costs), for the GPU cost model (cost/gpu_model.py).
    max_threads_per_sm: int = 2048
    clock_hz: float = 1.98e9

    @classmethod
    def h100(cls, target: tvm.target.Target | None = None) -> GPUSpec:
        """The H100 SXM5 (``sm_90``). Sources: NVIDIA H100 Tensor Core GPU Architecture whitepaper
        (132 SMs, 50 MB L2, 3.35 TB/s HBM3, 67 TFLOPS float32, 1980 MHz boost clock) and the
        CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" for 9.0
        (228 KB shared memory per SM, 227 KB per block, 1024 threads per block, 2048 resident
        threads per SM, warp size 32). The launch cost is an
        estimate (a few microseconds per launch through the CUDA runtime), not a datasheet figure.
        ``max_num_threads`` / ``thread_warp_size`` of ``target`` win over the defaults."""
        attrs = target.attrs if target is not None else {}
        return cls(name=f"cuda:{attrs.get('arch', 'sm_90')}", num_cores=132, vector_bytes=16,
                   fast_memory_bytes=227 * 1024,
                   max_threads_per_block=int(attrs.get("max_num_threads", 1024)),
                   warp_size=int(attrs.get("thread_warp_size", 32)))


SpecFactory = Callable[[tvm.target.Target], HardwareSpec]
_FACTORIES: dict[str, SpecFactory] = {}


def register_spec(target_key: str):
    """Decorator: ``factory(target) -> HardwareSpec`` for targets whose ``keys`` hold ``target_key``."""

    def _register(factory: SpecFactory) -> SpecFactory:
        _FACTORIES[target_key] = factory
        return factory

    return _register


def spec_for_target(target: tvm.target.Target | str | dict | None = None) -> HardwareSpec:
    """The spec of ``target`` (default: the current target, else the host CPU)."""
    target = _as_target(target)
    keys = list(target.keys) if target is not None else []
    for key in keys:
        if key in _FACTORIES:
            return _FACTORIES[key](target)
    return CPUSpec.from_target(target)


@register_spec("cuda")
def _cuda_spec(target: tvm.target.Target) -> HardwareSpec:
    """Every ``cuda`` target gets the H100's facts (the GPU this package's GPU figures are for)."""
    return GPUSpec.h100(target)


def _as_target(target) -> tvm.target.Target | None:
    if target is None:
        return tvm.target.Target.current(allow_none=True)
    if isinstance(target, (str, dict)):
        return tvm.target.Target(target)
    return target


def _host_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@functools.cache
def host_caches() -> dict[int, int]:
    """Data/unified cache size per level from sysfs, in bytes (empty where sysfs is missing);
    read once per process (a spec is asked for per scheduled kernel)."""
    sizes: dict[int, int] = {}
    if not _SYS_CACHE.is_dir():
        return sizes
    for index in sorted(_SYS_CACHE.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text().strip())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            sizes[level] = size
    return sizes


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def _vector_bits(target: tvm.target.Target | None) -> int:
    """SIMD width LLVM will use for ``target``: explicit ``vector-width``, else from CPU features.

    A plain ``llvm`` target (no ``mcpu``) compiles for generic x86-64, i.e. 128-bit SSE2.
    """
    if target is None or target.kind.name != "llvm":
        return 128
    explicit = target.attrs.get("vector-width")
    if explicit:
        return int(explicit)
    mattr = [str(a) for a in target.attrs.get("mattr", [])]
    if "mcpu" not in target.attrs and not mattr:
        return 128
    from tvm.target import codegen

    for feature, bits in (("avx512f", 512), ("avx", 256), ("neon", 128), ("sse2", 128)):
        try:
            if codegen.llvm_cpu_has_features(feature, target):
                return bits
        except Exception:  # noqa: BLE001, S112 - feature names unknown to this LLVM triple
            continue
    return 128

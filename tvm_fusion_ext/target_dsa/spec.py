"""``DSASpec``: the DNN DSA abstraction of GraphTurbo section 1, Fig. 1, as one frozen object.

The abstraction (graphturbo-dsa-scheduling.txt section 1, Fig. 1): ``d`` clusters stacked behind a
DMA to DDR; each cluster has ``c`` cores sharing a scratchpad global buffer (GB); each core has a
scratchpad local buffer (LB) and ``u`` compute units (CUs) of different kinds.

Presets:

* ``stcp920`` - GraphTurbo section 5, formula (2), exactly: d=4, c=8, u=3, LB = 64 KB L1,
  GB = 8 MB LLB, CU1 = vector core, CU2 = VME (vector MAC engine), CU3 = MME (matrix MAC engine),
  and the 136 GB/s DDR bandwidth of section 6 ("STCP920 only delivers a memory bandwidth of
  136GB/s"). The paper gives no clock, CU throughputs, GB/LB bandwidths or DMA latency; those
  fields carry the documented assumptions in :data:`_STCP920_ASSUMED` (see ``docs/dsa.md``).
* ``goya-like`` and ``ascend-like`` - *illustrative* configurations after Fig. 1's right side
  (Goya: d=1, c=9, u=1; Ascend 910: cube + vector units per core); all numbers there are assumed.

A user describes a chip in JSON or TOML with the same field names (:meth:`DSASpec.from_file`).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import tvm

from ..hardware.spec import HardwareSpec, spec_for_target

UNIT_KINDS = ("vector", "vmac", "matrix", "scalar")
KB = 1024
MB = 1024 * 1024


@dataclass(frozen=True)
class ComputeUnit:
    """One CU of a core (GraphTurbo Fig. 1 "CU").

    ``kind``: ``vector`` (element-wise / reductions), ``vmac`` (multiply-accumulate streams, e.g.
    STCP920's VME), ``matrix`` (tiles of a GEMM, e.g. STCP920's MME) or ``scalar``.
    ``ops_per_cycle``: operations (a multiply-accumulate counts as one) it retires per cycle.
    ``matrix_shape``: (M, N, K) of one matrix-unit instruction (``matrix`` kind only).
    """

    name: str
    kind: str
    ops_per_cycle: int
    matrix_shape: tuple[int, int, int] | None = None

    def __post_init__(self):
        if self.kind not in UNIT_KINDS:
            raise ValueError(f"compute unit {self.name!r}: kind {self.kind!r} not in {UNIT_KINDS}")
        if self.ops_per_cycle <= 0:
            raise ValueError(f"compute unit {self.name!r}: ops_per_cycle must be positive")
        if self.kind == "matrix" and (self.matrix_shape is None or len(self.matrix_shape) != 3):
            raise ValueError(f"matrix unit {self.name!r} needs matrix_shape = [M, N, K]")
        if self.matrix_shape is not None:
            object.__setattr__(self, "matrix_shape", tuple(int(v) for v in self.matrix_shape))


@dataclass(frozen=True)
class DSASpec(HardwareSpec):
    """A DSA per GraphTurbo Fig. 1. ``fast_memory_bytes`` is the LB; ``num_cores`` is ``d * c``.

    Bandwidths are in bytes per second; ``ddr_bandwidth`` is shared by every core that moves data
    at the same time, ``gb_bandwidth`` by the cores of one cluster, ``lb_bandwidth`` is per core.
    ``dma_engines`` per core: with 2 or more, loads and stores run on separate engines.
    ``dma_latency_cycles`` is paid once per transfer; ``launch_cycles`` once per kernel.
    """

    clusters: int = 1
    cores_per_cluster: int = 1
    units: tuple[ComputeUnit, ...] = ()
    lb_bytes: int = 64 * KB
    gb_bytes: int = 8 * MB
    ddr_bandwidth: int = 136 * 10**9
    gb_bandwidth: int = 256 * 10**9
    lb_bandwidth: int = 128 * 10**9
    dma_engines: int = 1
    dma_latency_cycles: int = 0
    launch_cycles: int = 0
    clock_hz: int = 10**9
    illustrative: bool = False
    notes: str = ""
    assumed: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if not self.units:
            raise ValueError(f"DSA {self.name!r} needs at least one compute unit")
        object.__setattr__(self, "units", tuple(
            u if isinstance(u, ComputeUnit) else ComputeUnit(**u) for u in self.units))
        object.__setattr__(self, "assumed", tuple(self.assumed))
        if self.num_cores != self.clusters * self.cores_per_cluster:
            raise ValueError(f"DSA {self.name!r}: num_cores must be clusters * cores_per_cluster")
        if self.fast_memory_bytes != self.lb_bytes:
            raise ValueError(f"DSA {self.name!r}: fast_memory_bytes must equal lb_bytes")

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, clusters: int, cores_per_cluster: int, units, lb_bytes: int,
               gb_bytes: int, **kwargs) -> DSASpec:
        """Fill the :class:`HardwareSpec` fields from the DSA ones (fast memory = LB)."""
        units = tuple(u if isinstance(u, ComputeUnit) else ComputeUnit(**u) for u in units)
        vector = next((u for u in units if u.kind == "vector"), units[0])
        kwargs.setdefault("vector_bytes", 4 * vector.ops_per_cycle)
        return cls(name=name, num_cores=clusters * cores_per_cluster,
                   fast_memory_bytes=lb_bytes, clusters=clusters,
                   cores_per_cluster=cores_per_cluster, units=units, lb_bytes=lb_bytes,
                   gb_bytes=gb_bytes, **kwargs)

    @classmethod
    def from_dict(cls, data: dict) -> DSASpec:
        """From the JSON/TOML layout documented in ``docs/dsa.md`` (sizes in bytes); a missing,
        unknown or ill-typed field is a ``ValueError`` naming it."""
        problem = _field_problem(data)
        if problem:
            raise ValueError(problem)
        data = dict(data)
        units = data.pop("units")
        return cls.create(units=[ComputeUnit(**u) for u in units], **data)

    @classmethod
    def from_file(cls, path: str | Path) -> DSASpec:
        """Load a spec from ``*.json`` or ``*.toml``; any problem is a ``ValueError`` naming the
        file (and the field)."""
        path = Path(path)
        if path.suffix not in (".json", ".toml"):
            raise ValueError(f"{path}: spec files are .json or .toml")
        try:
            text = path.read_bytes()
            data = tomllib.loads(text.decode()) if path.suffix == ".toml" else json.loads(text)
        except OSError as err:
            raise ValueError(f"{path}: cannot read the spec file ({err.strerror})") from err
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a valid {path.suffix[1:].upper()} file ({err})") from err
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err

    @classmethod
    def from_target(cls, target: tvm.target.Target | str | None = None) -> DSASpec:
        """The spec registered for a ``dsa/<name>`` target (its ``mcpu`` names the spec), found
        through the factory :mod:`.target` registers for the ``"dsa"`` key."""
        if target is None:
            target = tvm.target.Target.current(allow_none=True)
        if isinstance(target, (str, dict)):
            target = tvm.target.Target(target)
        if target is None or "dsa" not in list(target.keys):
            raise ValueError(f"{target} is not a DSA target (its keys lack 'dsa')")
        return spec_for_target(target)

    def to_dict(self) -> dict:
        out = asdict(self)
        for key in ("num_cores", "fast_memory_bytes", "vector_bytes", "vector_registers"):
            out.pop(key)
        out["units"] = [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(u).items()
                         if v is not None} for u in self.units]
        out["assumed"] = list(self.assumed)
        return out

    # ---- derived facts used by the scheduler and the simulator ------------------------------
    def unit(self, kind: str) -> ComputeUnit | None:
        """The first unit of ``kind``, else None."""
        return next((u for u in self.units if u.kind == kind), None)

    def unit_for(self, kind: str) -> ComputeUnit:
        """Where work of ``kind`` runs: that unit if the core has one, else the vector unit."""
        fallback = {"matrix": ("vmac", "vector"), "vmac": ("vector",), "vector": ("scalar",),
                    "scalar": ("vector",)}
        for candidate in (kind, *fallback.get(kind, ())):
            unit = self.unit(candidate)
            if unit is not None:
                return unit
        return self.units[0]

    @property
    def matrix_shape(self) -> tuple[int, int, int] | None:
        unit = self.unit("matrix")
        return unit.matrix_shape if unit is not None else None

    def bytes_per_cycle(self, level: str) -> Fraction:
        """Bandwidth of one memory level (``ddr``/``gb``/``lb``) in bytes per cycle."""
        bandwidth = {"ddr": self.ddr_bandwidth, "gb": self.gb_bandwidth, "lb": self.lb_bandwidth}
        return Fraction(bandwidth[level], self.clock_hz)

    def cycles_to_ms(self, cycles: int) -> float:
        return cycles * 1e3 / self.clock_hz


_REQUIRED = ("name", "clusters", "cores_per_cluster", "units", "lb_bytes", "gb_bytes")
_POSITIVE = ("clusters", "cores_per_cluster", "lb_bytes", "gb_bytes", "ddr_bandwidth", "gb_bandwidth",
             "lb_bandwidth", "dma_engines", "clock_hz", "vector_bytes", "vector_registers")
_NON_NEGATIVE = ("dma_latency_cycles", "launch_cycles")
_OPTIONAL = ("illustrative", "notes", "assumed") + _POSITIVE + _NON_NEGATIVE
_UNIT_FIELDS = ("name", "kind", "ops_per_cycle", "matrix_shape")


def _field_problem(data) -> str | None:
    """What is wrong with a spec file's fields (missing, unknown, wrong type or sign), or None."""
    if not isinstance(data, dict):
        return f"a spec is a table of fields, not {type(data).__name__}"
    missing = [k for k in _REQUIRED if k not in data]
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or unknown:
        return "; ".join([f"missing field {k!r}" for k in missing] + [f"unknown field {k!r}" for k in unknown])
    if not isinstance(data["name"], str) or not data["name"]:
        return f"field 'name' must be a non-empty string, got {data['name']!r}"
    for key in _POSITIVE + _NON_NEGATIVE:
        value = data.get(key, 1)
        if not _is_int(value) or value < (key in _POSITIVE):
            sign = "a positive" if key in _POSITIVE else "a non-negative"
            return f"field {key!r} must be {sign} integer, got {value!r}"
    units = data["units"]
    if not isinstance(units, list) or not units:
        return "field 'units' must be a non-empty list of compute units"
    for i, unit in enumerate(units):
        if not isinstance(unit, dict):
            return f"field 'units[{i}]' must be a table, got {unit!r}"
        unknown = sorted(set(unit) - set(_UNIT_FIELDS))
        missing = [k for k in _UNIT_FIELDS[:3] if k not in unit]
        if unknown or missing:
            return f"field 'units[{i}]': " + "; ".join(
                [f"missing field {k!r}" for k in missing] + [f"unknown field {k!r}" for k in unknown])
        if not _is_int(unit["ops_per_cycle"]):
            return f"field 'units[{i}].ops_per_cycle' must be an integer, got {unit['ops_per_cycle']!r}"
        shape = unit.get("matrix_shape")
        if shape is not None and not (isinstance(shape, list) and len(shape) == 3
                                      and all(_is_int(v) and v > 0 for v in shape)):
            return f"field 'units[{i}].matrix_shape' must be [M, N, K] of positive integers, got {shape!r}"
    return None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Values GraphTurbo does not give for STCP920; every one is an assumption stated in docs/dsa.md.
_STCP920_ASSUMED = ("clock_hz", "units.ops_per_cycle", "units.matrix_shape", "gb_bandwidth",
                    "lb_bandwidth", "dma_engines", "dma_latency_cycles", "launch_cycles")

PRESETS: dict[str, DSASpec] = {
    "stcp920": DSASpec.create(
        name="stcp920", clusters=4, cores_per_cluster=8,
        units=(ComputeUnit("vector_core", "vector", 16),
               ComputeUnit("vme", "vmac", 64),
               ComputeUnit("mme", "matrix", 256, (16, 16, 16))),
        lb_bytes=64 * KB, gb_bytes=8 * MB, ddr_bandwidth=136 * 10**9,
        gb_bandwidth=512 * 10**9, lb_bandwidth=128 * 10**9, dma_engines=2,
        dma_latency_cycles=64, launch_cycles=1000, clock_hz=10**9,
        notes="GraphTurbo section 5, formula (2): d=4, c=8, u=3, LB=64KB L1, GB=8MB LLB, "
              "CU1=vector core, CU2=VME, CU3=MME; 136 GB/s DDR (section 6).",
        assumed=_STCP920_ASSUMED),
    "goya-like": DSASpec.create(
        name="goya-like", clusters=1, cores_per_cluster=9,
        units=(ComputeUnit("tpc", "vector", 64),),
        lb_bytes=80 * KB, gb_bytes=24 * MB, ddr_bandwidth=40 * 10**9,
        gb_bandwidth=200 * 10**9, lb_bandwidth=256 * 10**9, dma_engines=1,
        dma_latency_cycles=100, launch_cycles=2000, clock_hz=int(1.5 * 10**9), illustrative=True,
        notes="Illustrative, after GraphTurbo Fig. 1 (Habana Goya: d=1, c=9, u=1 TPC with LB); "
              "the GEMM engine without LB is not modelled; numbers assumed.",
        assumed=("everything but d, c, u",)),
    "ascend-like": DSASpec.create(
        name="ascend-like", clusters=1, cores_per_cluster=32,
        units=(ComputeUnit("vector", "vector", 128),
               ComputeUnit("cube", "matrix", 4096, (16, 16, 16))),
        lb_bytes=256 * KB, gb_bytes=32 * MB, ddr_bandwidth=1200 * 10**9,
        gb_bandwidth=4000 * 10**9, lb_bandwidth=512 * 10**9, dma_engines=2,
        dma_latency_cycles=128, launch_cycles=3000, clock_hz=int(1.0 * 10**9), illustrative=True,
        notes="Illustrative, after GraphTurbo Fig. 1 (Huawei Ascend 910: 32 cores with a cube and a "
              "vector unit each); numbers assumed.",
        assumed=("everything but the unit kinds",)),
}

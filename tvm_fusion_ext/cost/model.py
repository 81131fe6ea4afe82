"""Predicted run time of one kernel as the default CPU schedule makes it.

The model is a roofline per loop nest over :func:`.features.kernel_features` of the scheduled TIR::

    time = launch + sum over nests of max(sum over classes ops_c / (rate_c * cores_used), bytes / bandwidth)

with one arithmetic rate per schedule class (register-tiled contraction, scalar reduction chain,
vectorised, scalar), the parallel speedup of a nest inside a parallel loop, the memory bandwidth
and the cost of one kernel call. Those constants are :class:`Rates`, measured on the host by
:mod:`.calibration`. It is the "cost model of the scheduled TIR calibrated on the host" that the
fusion decisions of APOLLO (upward feedback, sections 2 and 5), NeoFlow (Eq. (4)), GraphTurbo
(Algorithm 2's merges) and backward dominator fusion consult (:mod:`.profitability`).

A kernel is scheduled with :func:`~tvm_fusion_ext.tir_passes.default_schedule.untuned_schedule`;
when every rule declines, the kernel is predicted as it stands (serial scalar loop nests, every
intermediate in memory), which is how it would run. Predictions are cached in memory by the
structural hash of the unscheduled kernel (``tvm_ffi.structural_hash``): a model's repeated layers,
and a second compile in the same process, cost one dictionary look-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import tvm
import tvm_ffi
from tvm import tirx

from ..tir_passes.default_schedule import untuned_schedule
from .features import CLASSES, NestFeatures, kernel_features


@dataclass(frozen=True)
class Rates:
    """The host's constants: ``launch`` s per kernel call, ``bandwidth`` bytes/s, ``parallel``
    speedup of a parallel loop nest, and operations/s of one core per schedule class
    (:data:`.features.CLASSES`)."""

    launch: float
    bandwidth: float
    parallel: float
    tiled: float
    reduce: float
    vector: float
    scalar: float

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> Rates:
        """Rates from :meth:`to_json`'s dict; ``ValueError`` when a field is missing or not a
        positive number."""
        if not isinstance(data, dict):
            raise ValueError("rates are not an object")  # noqa: TRY004 - a corrupt file, not a bug
        values = {}
        for name in cls.__dataclass_fields__:
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"rate {name!r} is {value!r}, not a positive number")
            values[name] = float(value)
        return cls(**values)

    def class_rate(self, kind: str) -> float:
        if kind not in CLASSES:
            raise ValueError(f"unknown schedule class {kind!r}")
        return getattr(self, kind)


def predict_nests(nests: list[NestFeatures], rates: Rates) -> float:
    """Seconds of one call of a kernel with these nests (the formula of the module docstring)."""
    total = rates.launch
    for nest in nests:
        compute = sum(ops / (rates.class_rate(kind) * (rates.parallel if parallel else 1.0))
                      for (kind, parallel), ops in nest.ops.items())
        total += max(compute, nest.bytes / rates.bandwidth)
    return total


def scheduled(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc:
    """``func`` as the default schedule leaves it (unchanged when every rule declines)."""
    sch = untuned_schedule(func, target)
    return sch.mod["main"] if sch is not None else func


class KernelCostModel:
    """Predicted seconds per kernel for ``target`` under ``rates`` (module docstring); results
    are cached in ``self.cache`` by the structural hash of the unscheduled kernel."""

    def __init__(self, target: tvm.target.Target, rates: Rates):
        self.target = target
        self.rates = rates
        self.cache: dict[int, float] = {}

    def seconds(self, func: tirx.PrimFunc) -> float:
        key = tvm_ffi.structural_hash(func)
        if key not in self.cache:
            self.cache[key] = predict_nests(kernel_features(scheduled(func, self.target)), self.rates)
        return self.cache[key]

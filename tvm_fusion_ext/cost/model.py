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
intermediate in memory), which is how it would run. Predictions are cached by the structural hash
of the unscheduled kernel (``tvm_ffi.structural_hash``), in memory and in a JSON-lines file of the
cache directory: a model's repeated layers, and a second compile (in this process or a new one),
cost one dictionary look-up.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm import tirx

from .. import tir_passes
from ..hardware.spec import spec_for_target
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


class RememberedPredictions:
    """What every kernel model shares: predicted seconds per kernel, remembered under string keys
    (:meth:`remembered`): a kernel by the structural hash of its unscheduled PrimFunc, and
    whatever key a caller gives (:mod:`.profitability` keys a candidate group by its structure,
    so that it need not even be fused again). With a ``store`` path they are also appended to
    that JSON-lines file and read back by the next model of the same store, so a second compile
    in a new process predicts nothing again. A model predicts in :meth:`predict`."""

    def __init__(self, store: Path | None = None):
        self.store = store
        self.cache: dict[str, float] = _read_store(store) if store is not None else {}

    def seconds(self, func: tirx.PrimFunc) -> float:
        """Predicted seconds of one call of ``func`` (:meth:`predict`, remembered)."""
        return self.remembered(f"kernel:{tvm_ffi.structural_hash(func)}", lambda: self.predict(func))

    def remembered(self, key: str, predict) -> float:
        """The prediction remembered under ``key``, else ``predict()`` (remembered from now on)."""
        if key not in self.cache:
            self.cache[key] = predict()
            if self.store is not None:
                _append_store(self.store, key, self.cache[key])
        return self.cache[key]

    def predict(self, func: tirx.PrimFunc) -> float:
        """Predicted seconds of one call of ``func``, not remembered."""
        raise NotImplementedError


class KernelCostModel(RememberedPredictions):
    """Predicted seconds per kernel for ``target`` under ``rates`` (module docstring), remembered
    as :class:`RememberedPredictions` says (``store``: this host's, target's and rates' file)."""

    def __init__(self, target: tvm.target.Target, rates: Rates, store: Path | None = None):
        super().__init__(store)
        self.target = target
        self.spec = spec_for_target(target)
        self.rates = rates

    def predict(self, func: tirx.PrimFunc) -> float:
        """Predicted seconds of one call of ``func`` as the default schedule makes it."""
        return predict_nests(kernel_features(scheduled(func, self.target), self.spec), self.rates)


def store_name(target: tvm.target.Target, rates: Rates, host: str) -> str:
    """File name of the predictions of one host, target (and the spec the schedule reads for it:
    the cache sizes it tiles for), set of rates and version of the schedule
    (:func:`schedule_fingerprint`): a prediction is of the kernel the schedule made, so a changed
    schedule starts a new store instead of reading the old kernels' times."""
    facts = repr(spec_for_target(target))
    digest = hashlib.sha256(json.dumps([host, str(target), facts, rates.to_json(), schedule_fingerprint()],
                                       sort_keys=True).encode()).hexdigest()[:20]
    return f"predictions-{digest}.jsonl"


@functools.cache
def schedule_fingerprint() -> str:
    """A digest of the source of the package's TIR schedules (``tir_passes/``), of this model's
    features and formula and of how a group's kernel is made (``group_kernel.py``), which decide
    what a prediction is."""
    sources = sorted(Path(tir_passes.__file__).parent.glob("*.py")) + [
        Path(__file__).with_name(name) for name in ("features.py", "model.py", "group_kernel.py")]
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _read_store(path: Path) -> dict[str, float]:
    """Predictions of a JSON-lines store (``{"key": str, "seconds": number or null}`` per line,
    null for a group that makes no kernel); unreadable lines give one warning and are skipped."""
    cache: dict[str, float] = {}
    if not path.exists():
        return cache
    bad = 0
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        warnings.warn(f"{path}: cost-model predictions not read ({err})", stacklevel=3)
        return cache
    for line in lines:
        try:
            entry = json.loads(line)
            seconds = entry["seconds"]
            if not isinstance(entry["key"], str) or not (seconds is None or isinstance(seconds, float)):
                raise ValueError("not {key: str, seconds: float | null}")
            cache[entry["key"]] = math.inf if seconds is None else seconds
        except (ValueError, KeyError, TypeError):
            bad += 1
    if bad:
        warnings.warn(f"{path}: {bad} corrupt cost-model prediction line(s) ignored", stacklevel=3)
    return cache


def _append_store(path: Path, key: str, seconds: float) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps({"key": key, "seconds": None if math.isinf(seconds) else seconds})
                      + "\n")
    except OSError:  # a read-only cache directory: predictions stay in memory
        pass

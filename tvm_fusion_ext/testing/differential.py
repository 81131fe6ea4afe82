"""Differential testing of every fusion strategy against the unfused module.

:func:`check_module` compiles one module under every registered strategy (``fusion_names()``) on
each target, with the invariant checks of :mod:`tvm_fusion_ext.pipelines.instrument` on, runs it on random
non-zero inputs and compares with the unfused module compiled once for ``FAST_LLVM`` (``none``,
``unscheduled``), under ``verify.TOLERANCES``. Outcomes per strategy and target: ``ill-formed`` (an
invariant broke), ``crash`` (any other exception while compiling or running), ``mismatch``.

A strategy's pipeline is ``fusion_pipeline(name)`` followed by the scheduling and lowering passes,
which do not depend on the strategy; so when two strategies produce structurally equal fused
modules, the compiled result of the first is reused for the second (on small random graphs about
half the strategies coincide with another one).

:func:`save_regression` writes a failing module as a TVMScript file under ``tests/regressions/``;
``tests/test_regressions.py`` loads every such file and checks it under every strategy.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax

from ..pipelines import fusion_names, fusion_pipeline, lowering_passes, schedule_passes
from ..pipelines.instrument import InvariantError, checking_invariants, run_checked
from . import verify

# LLVM without its optimisations: what the bounded fuzz test compiles for (about half the codegen
# time of the default ``llvm``; fusion does not depend on the LLVM opt level).
FAST_LLVM = {"kind": "llvm", "opt-level": 0}
DSA_TARGET = "dsa/stcp920"
KINDS = ("ill-formed", "crash", "mismatch")


@dataclass(frozen=True)
class Failure:
    strategy: str
    target: str
    kind: str  # one of KINDS, or "reference" when the unfused module itself fails
    message: str

    @property
    def signature(self) -> tuple[str, str, str]:
        """``(strategy, kind, exception type)``: what a shrunk case must keep failing with."""
        return self.strategy, self.kind, self.message.split(":", 1)[0]

    def __str__(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.strategy} on {self.target}: {self.kind}: {first[:300]}"


@dataclass
class CaseResult:
    """What :func:`check_module` did: strategies x targets checked, distinct fused modules built."""

    checked: int = 0
    builds: int = 0
    failures: list[Failure] = field(default_factory=list)


def _target(target) -> tvm.target.Target:
    return tvm.target.Target(target) if isinstance(target, (str, dict)) else target


def _target_name(target: tvm.target.Target) -> str:
    if "dsa" in target.keys:
        return f"dsa/{target.attrs['mcpu']}"
    return str(target.kind.name)


def fuse(mod: tvm.IRModule, strategy: str, target) -> tvm.IRModule:
    """Pre-processing + fusion + ``FuseTIR`` of ``strategy`` with the invariant checks on."""
    target = _target(target)
    with target, checking_invariants():
        return run_checked(fusion_pipeline(strategy, target), mod)


def compile_fused(fused: tvm.IRModule, target, policy: str = "untuned") -> relax.VMExecutable:
    """The rest of every strategy's pipeline (scheduling + lowering, checked) and the build."""
    target = _target(target)
    with target, checking_invariants():
        lowered = run_checked(tvm.transform.Sequential(
            [*schedule_passes(target, policy), *lowering_passes(target)]), fused)
        return tvm.compile(lowered, target=target, relax_pipeline=tvm.transform.Sequential([]))


def reference_outputs(mod: tvm.IRModule, seed: int = 0):
    """``(inputs, outputs)`` of the unfused module (``none``, ``unscheduled``, :data:`FAST_LLVM`):
    the oracle keeps as little of the compiler as possible (LLVM's -O3 vectorisers produce invalid
    IR for some unscheduled loops, e.g. TOPI's silu on a (4, 2, 5) tensor for generic x86-64)."""
    inputs = verify.random_inputs(mod["main"], seed)
    target = tvm.target.Target(FAST_LLVM)
    return inputs, verify.run(verify.build(mod, "none", target, "unscheduled"), inputs)


def check_module(mod: tvm.IRModule, strategies: list[str] | None = None, targets=("llvm",),
                 policy: str = "untuned", seed: int = 0, reference=None) -> CaseResult:
    """Check ``mod`` under every strategy on every target (module docstring); never raises for a
    failing strategy, every failure is in the result. ``reference``: ``(inputs, outputs)`` of
    :func:`reference_outputs`, when the caller already has them."""
    strategies = list(strategies or fusion_names())
    result = CaseResult()
    if not relax.analysis.check_well_formed(mod):
        result.failures.append(Failure("input", "-", "ill-formed", "the input module is ill-formed"))
        return result
    try:
        inputs, expected = reference or reference_outputs(mod, seed)
    except Exception as err:  # noqa: BLE001  (any failure of the reference is reported)
        result.failures.append(Failure("none (reference)", "llvm", "reference", _message(err)))
        return result
    for target in map(_target, targets):
        compiled: list[tuple[tvm.IRModule, object]] = []  # fused module -> outputs or exception
        for name in strategies:
            result.checked += 1
            failure = _check_one(mod, name, target, policy, inputs, expected, compiled, result)
            if failure is not None:
                result.failures.append(failure)
    return result


def _check_one(mod, name, target, policy, inputs, expected, compiled, result) -> Failure | None:
    target_name = _target_name(target)
    try:
        fused = fuse(mod, name, target)
    except Exception as err:  # noqa: BLE001
        return Failure(name, target_name, _kind(err), _message(err))
    outcome = next((out for other, out in compiled if tvm_ffi.structural_equal(other, fused)), None)
    if outcome is None:
        result.builds += 1
        try:
            outcome = verify.run(compile_fused(fused, target, policy), inputs)
        except Exception as err:  # noqa: BLE001
            outcome = err
        compiled.append((fused, outcome))
    if isinstance(outcome, Exception):
        return Failure(name, target_name, _kind(outcome), _message(outcome))
    try:
        verify.assert_allclose_by_dtype(outcome, expected, context=f"{name} on {target_name}")
    except AssertionError as err:
        return Failure(name, target_name, "mismatch", _message(err))
    return None


def _kind(err: Exception) -> str:
    return "ill-formed" if isinstance(err, InvariantError) else "crash"


def _message(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}"


# ---- regression files ----------------------------------------------------------------------------

def regression_name(failures: list[Failure], mod: tvm.IRModule) -> str:
    """``<strategy>_<kind>_<hash of the module>``, a valid Python module name."""
    first = failures[0]
    digest = hashlib.sha1(mod.script().encode()).hexdigest()[:8]
    return re.sub(r"\W", "_", f"{first.strategy}_{first.kind}_{digest}").lower()


def save_regression(mod: tvm.IRModule, failures: list[Failure], directory: str | Path,
                    origin: str) -> Path:
    """Write ``mod`` as ``<directory>/<regression_name>.py``: TVMScript class ``Module``, and
    ``FAILED`` (the failures seen, ``(strategy, target, kind)``) for ``tests/test_regressions.py``.
    ``origin`` says how it was found (a command, a seed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{regression_name(failures, mod)}.py"
    script = "\n".join(line for line in mod.script().splitlines()
                       if not line.startswith("# from tvm.script"))
    summary = "\n".join(f"* {f}" for f in failures)
    failed = ",\n".join(f"    ({f.strategy!r}, {f.target!r}, {f.kind!r})" for f in failures)
    path.write_text(
        f'"""Fuzzing regression ({origin}).\n\n{_escape(summary)}\n"""\n\n'
        "from tvm.script import ir as I\nfrom tvm.script import relax as R\n"
        "from tvm.script import tirx as T  # noqa: F401\n\n"
        f"# (strategy, target, kind) that failed when this file was written.\nFAILED = [\n{failed},\n]\n"
        "# strategy -> reason, for failures not fixed yet (checked as strict xfails).\nXFAIL: dict = {}\n\n"
        f"{script.strip()}\n")
    return path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


def load_regression(path: str | Path):
    """``(module, FAILED, XFAIL)`` of a regression file."""
    import importlib.util

    path = Path(path)
    name = f"tvm_fusion_ext_regression_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the TVMScript parser looks its source up through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.Module, list(getattr(module, "FAILED", [])), dict(getattr(module, "XFAIL", {}))

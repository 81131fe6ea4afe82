"""Target tags ``dsa/<name>`` for every :class:`DSASpec` (registered when the package is imported).

TVM 0.27 registers target *kinds* in C++ only (``TVM_REGISTER_TARGET_KIND``), so a DSA is a *tag*
over kind ``c``: ``keys`` holds ``"dsa"`` (so every DSA-aware pass and :func:`spec_for_target`
recognise it), ``mcpu`` names the spec, and the host is the same C target, so every PrimFunc
goes through ``target.build.c`` (overridden in :mod:`.codegen`). The numeric DSA facts have no
slot in a ``Target``; they live in :data:`_SPECS`, keyed by the spec name.

A user chip: ``register_dsa_target("my-chip", "my_chip.toml")`` then ``Target("dsa/my-chip")``.
"""

from __future__ import annotations

from pathlib import Path

import tvm
from tvm import tirx

from ..hardware.spec import register_spec
from .spec import PRESETS, DSASpec

TAG_PREFIX = "dsa/"
KEYS = ("dsa", "cpu")
_SPECS: dict[str, DSASpec] = {}

# C math functions for the TIR intrinsics LegalizeOps emits; kind "c" has no lowering for them.
_C_MATH = ("exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "pow", "fabs", "floor", "ceil",
           "round", "trunc", "log2", "log10", "exp2", "atan", "asin", "acos", "sinh", "cosh")


def tag_name(name: str) -> str:
    return name if name.startswith(TAG_PREFIX) else TAG_PREFIX + name


def target_config(spec: DSASpec) -> dict:
    """The tag's configuration: kind ``c`` for the device and the host, DSA identity in the keys."""
    device = {"kind": "c", "keys": list(KEYS), "mcpu": spec.name, "model": spec.name,
              "device": "dsa"}
    return {**device, "host": dict(device)}


def register_dsa_target(name: str, spec: DSASpec | str | Path | None = None) -> tvm.target.Target:
    """Register ``spec`` (a :class:`DSASpec`, a JSON/TOML path, or a preset name) as ``dsa/<name>``.

    Returns the target. Re-registering a name replaces it (``override=True``), so importing the
    package twice or reloading a spec file is harmless.
    """
    if spec is None:
        spec = PRESETS[name]
    elif isinstance(spec, (str, Path)):
        spec = PRESETS[str(spec)] if str(spec) in PRESETS else DSASpec.from_file(spec)
    bare = name.removeprefix(TAG_PREFIX)
    if spec.name != bare:
        spec = _renamed(spec, bare)
    _SPECS[bare] = spec
    tvm.target.register_tag(tag_name(bare), target_config(spec), override=True)
    return tvm.target.Target(tag_name(bare))


def registered_names() -> list[str]:
    return sorted(_SPECS)


def is_dsa(target: tvm.target.Target | None) -> bool:
    return target is not None and "dsa" in list(target.keys)


def spec_of_target(target: tvm.target.Target | str | None = None) -> DSASpec:
    """The :class:`DSASpec` of a DSA target (default: the current target)."""
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    if isinstance(target, (str, dict)):
        target = tvm.target.Target(target)
    if not is_dsa(target):
        raise ValueError(f"{target} is not a DSA target (its keys lack 'dsa')")
    name = str(target.attrs.get("mcpu", ""))
    if name not in _SPECS:
        raise ValueError(f"no DSA spec registered under {name!r}; known: {registered_names()}")
    return _SPECS[name]


@register_spec("dsa")
def _dsa_spec_factory(target: tvm.target.Target) -> DSASpec:
    return spec_of_target(target)


def _renamed(spec: DSASpec, name: str) -> DSASpec:
    data = spec.to_dict()
    data["name"] = name
    return DSASpec.from_dict(data)


def _c_math(function: str):
    def _lower(call):
        dtype = str(call.ty)
        suffix = "f" if dtype == "float32" else ""
        if dtype not in ("float32", "float64"):
            return call
        return tirx.call_pure_extern(dtype, function + suffix, *call.args)

    return _lower


def _register_c_math() -> None:
    """Lower TIR math intrinsics to libm calls for kind ``c`` (level 100 keeps TVM's own first)."""
    for name in _C_MATH:
        op = f"tirx.{name}"
        try:
            tvm.ir.Op.get(op)
        except (AttributeError, ValueError):
            continue
        tvm.ir.register_op_attr(op, "c.FLowerIntrinsic", _c_math(name), level=100)


def _register_presets() -> None:
    for name, spec in PRESETS.items():
        register_dsa_target(name, spec)


_register_c_math()
_register_presets()

"""Model files in, compiled artifacts out: what ``tvm-fusion export / compile / run`` share.

* Input shapes: :func:`parse_input_shapes` reads tvmc's ``name:[1,3,224,224]`` syntax;
  :func:`bind_onnx_input_shapes` and :func:`bind_relax_input_shapes` make a model's dynamic
  input dimensions static, and name the input (and its dimensions) when one is left dynamic.
* :func:`compile_model`: a Relax module through one strategy's complete pipeline
  (:func:`~tvm_fusion_ext.pipelines.pipeline`), under a MetaSchedule database for the ``tuned`` policy, with
  :class:`DumpPhases` writing the module after each phase (:data:`~tvm_fusion_ext.pipelines.PHASES`).
* :func:`save_artifact` / :func:`load_artifact`: one shared library (``export_library``) that
  ``tvm.runtime.load_module`` + ``relax.VirtualMachine`` run, and beside it a JSON sidecar
  ``<library>.json`` (:class:`Artifact`: inputs, target, fusion, policy and, on a DSA target, the
  kernel models the simulator needs, which the compiled library no longer carries).
* :meth:`Artifact.check_inputs`: an input file's arrays against the inputs the model takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..backends import backend_for
from ..pipelines import PHASE_PREFIX, POLICIES, get_strategy
from .build import build, instrumented, target_device

SIDECAR_SUFFIX = ".json"
ARTIFACT_FORMAT = "tvm_fusion_ext.artifact/1"
_SHAPE_ITEM = re.compile(r"^(?P<name>.+):\[(?P<dims>[^\]]*)\]$")


# ------------------------------------------------------------------------------------------------
# Input shapes
# ------------------------------------------------------------------------------------------------
def parse_input_shapes(items: list[str] | None) -> dict[str, list[int]]:
    """``["x:[1,3,224,224]", "y:[1,16] z:[2]"]`` -> ``{"x": [1, 3, 224, 224], ...}``.

    tvmc's syntax: each item is ``NAME:[d0,d1,...]``; several may share one argument separated
    by spaces. The name is everything before the last ``:[``, so names holding ``:`` work.
    """
    shapes: dict[str, list[int]] = {}
    for item in (part for text in items or [] for part in re.findall(r"\S+?:\[[^\]]*\]|\S+", text)):
        match = _SHAPE_ITEM.match(item)
        if match is None:
            raise ValueError(f"--input-shapes {item!r} is not NAME:[d0,d1,...]")
        name, dims = match["name"], [d.strip() for d in match["dims"].split(",") if d.strip()]
        if not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"--input-shapes {item!r}: every dimension must be a positive integer")
        if name in shapes:
            raise ValueError(f"--input-shapes gives input {name!r} twice")
        shapes[name] = [int(d) for d in dims]
    return shapes


def bind_onnx_input_shapes(model, shapes: dict[str, list[int]] | None, what: str):
    """``model`` (an ``onnx.ModelProto``, changed in place) with ``shapes`` written into its graph
    inputs; a ``ValueError`` naming the input for an unknown name, a rank or static-dimension
    mismatch, or a dynamic dimension that no shape binds.

    Binding in the graph (rather than only in ``from_onnx``'s ``shape_dict``) lets ONNX Runtime's
    constant folding (:func:`zoo.frontends.fold_onnx_constants`) see static shapes too.
    """
    shapes = dict(shapes or {})
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    _check_known_names(shapes, [value.name for value in inputs], what)
    for value in inputs:
        dims = value.type.tensor_type.shape.dim
        shown = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                 for d in dims]
        if value.name not in shapes:
            if any(isinstance(d, str) for d in shown):
                raise _dynamic_error(what, value.name, shown)
            continue
        _check_bindable(what, value.name, shown, shapes[value.name])
        for dim, size in zip(dims, shapes[value.name]):
            dim.dim_value = size
    return model


def bind_relax_input_shapes(mod: tvm.IRModule, shapes: dict[str, list[int]] | None,
                            what: str) -> tvm.IRModule:
    """``mod`` with the symbolic dimensions of ``main``'s inputs bound to ``shapes``
    (``relax.transform.BindSymbolicVars``); the same errors as :func:`bind_onnx_input_shapes`."""
    shapes = dict(shapes or {})
    params = [p for p in mod["main"].params if isinstance(p.ty, relax.TensorType)]
    _check_known_names(shapes, [p.name for p in params], what)
    dims = {}
    for param in params:
        if param.ty.shape is None:
            raise ValueError(f"{what}: input {param.name!r} has an unknown rank")
        dims[param.name] = list(param.ty.shape.values)
    binding: dict[str, int] = {}
    for name, shape in shapes.items():
        _check_bindable(what, name, _shown(dims[name]), shape)
        for dim, size in zip(dims[name], shape):
            if isinstance(dim, tvm.tirx.IntImm):
                continue
            if isinstance(dim, tvm.tirx.Var):
                if binding.setdefault(dim.name, size) != size:
                    raise ValueError(f"{what}: --input-shapes binds dimension {dim.name} to both "
                                     f"{binding[dim.name]} and {size}")
                continue
            raise ValueError(f"{what}: input {name!r} dimension {dim} is an expression; "
                             "only plain symbolic dimensions can be bound")
    for name, param_dims in dims.items():   # inputs left unbound may share bound dimensions
        if any(not isinstance(d, tvm.tirx.IntImm) and str(d) not in binding for d in param_dims):
            raise _dynamic_error(what, name, _shown(param_dims))
    if not binding:
        return mod
    return relax.transform.BindSymbolicVars(binding, "main")(mod)


def _shown(dims: list) -> list:
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in dims]


def _check_known_names(shapes: dict, names: list[str], what: str) -> None:
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ValueError(f"{what}: --input-shapes names no input {unknown[0]!r}; inputs: {', '.join(names)}")


def _check_bindable(what: str, name: str, shown: list, shape: list[int]) -> None:
    if len(shown) != len(shape):
        raise ValueError(f"{what}: input {name!r} has rank {len(shown)} {_dims(shown)}, "
                         f"--input-shapes gives rank {len(shape)} {shape}")
    for dim, size in zip(shown, shape):
        if isinstance(dim, int) and dim != size:
            raise ValueError(f"{what}: input {name!r} has shape {_dims(shown)}, "
                             f"--input-shapes gives {shape}")


def _dynamic_error(what: str, name: str, shown: list) -> ValueError:
    example = ",".join(str(d) if isinstance(d, int) else "1" for d in shown)
    return ValueError(f"{what}: input {name!r} has dynamic dimensions {_dims(shown)}; "
                      f"give its shape with --input-shapes, e.g. {name}:[{example}]")


def _dims(shown: list) -> str:
    return "[" + ", ".join(str(d) for d in shown) + "]"


# ------------------------------------------------------------------------------------------------
# Compiling, with the module dumped after each phase
# ------------------------------------------------------------------------------------------------
@tvm.ir.instrument.pass_instrument
class DumpPhases:
    """Writes the module as TVMScript after each pipeline phase: ``NN_<phase>.py`` in ``out_dir``
    (``00_input.py`` is the module handed to the pipeline, see :func:`compile_model`)."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.written: list[str] = []

    def write(self, phase: str, mod: tvm.IRModule) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"{len(self.written):02d}_{phase}.py")
        with open(path, "w") as out:
            out.write(mod.script(show_meta=False))
        self.written.append(path)

    def run_after_pass(self, mod, info):
        if info.name.startswith(PHASE_PREFIX):
            self.write(info.name.removeprefix(PHASE_PREFIX), mod)


def check_target_buildable(target: tvm.target.Target) -> None:
    """A ``ValueError`` when this TVM build has no code generator for ``target``'s kind, or no
    backend of the package's pipelines schedules and lowers for it (:mod:`tvm_fusion_ext.backends`)."""
    kind = target.kind.name
    if tvm.get_global_func(f"target.build.{kind}", allow_missing=True) is None:
        raise ValueError(f"target kind {kind!r}: this TVM build has no code generator for it")
    backend_for(target)


def compile_model(mod: tvm.IRModule, fusion: str, target: tvm.target.Target, policy: str = "untuned",
                  database=None, dump_ir: str | None = None, cost_check: bool = True):
    """``mod`` compiled through strategy ``fusion`` under ``policy`` (a VM executable); ``cost_check``
    as for :func:`~tvm_fusion_ext.pipelines.pipeline`.

    ``tuned`` applies the records of ``database`` (a MetaSchedule database; kernels without a
    record get the untuned schedule). ``dump_ir`` names a directory for :class:`DumpPhases`.
    """
    get_strategy(fusion)
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
    if (policy == "tuned") != (database is not None):
        raise ValueError("the tuned policy needs tuning records (--tuning-records DIR), and tuning "
                         "records need the tuned policy")
    check_target_buildable(target)
    instruments = []
    if dump_ir:
        dump = DumpPhases(dump_ir)
        dump.write("input", mod)
        instruments.append(dump)
    with instrumented(*instruments), (database if database is not None else contextlib.nullcontext()):
        return build(mod, fusion, target, policy, cost_check)


# ------------------------------------------------------------------------------------------------
# The shared library and its sidecar
# ------------------------------------------------------------------------------------------------
@dataclass
class InputSpec:
    name: str
    shape: list[int]
    dtype: str


@dataclass
class Artifact:
    """What the sidecar of a compiled model says (written by :func:`save_artifact`)."""

    model: str
    inputs: list[InputSpec]
    target: str          # the target's JSON form (``str(Target)``)
    fusion: str
    policy: str
    # DSA targets: kernel symbol -> kernel model (target_dsa.codegen.kernel_models).
    dsa_kernel_models: dict | None = None
    tvm_version: str = field(default_factory=lambda: tvm.__version__)

    def to_json(self) -> dict:
        data = {"format": ARTIFACT_FORMAT, **asdict(self)}
        if data["dsa_kernel_models"] is None:
            del data["dsa_kernel_models"]
        return data

    @classmethod
    def from_json(cls, data: dict, what: str) -> Artifact:
        if not isinstance(data, dict) or data.get("format") != ARTIFACT_FORMAT:
            raise ValueError(f"{what}: not a tvm-fusion compile sidecar (format {ARTIFACT_FORMAT})")
        try:
            inputs = [InputSpec(str(i["name"]), [int(d) for d in i["shape"]], str(i["dtype"]))
                      for i in data["inputs"]]
            return cls(str(data["model"]), inputs, str(data["target"]), str(data["fusion"]),
                       str(data["policy"]), data.get("dsa_kernel_models"), str(data["tvm_version"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{what}: malformed sidecar ({type(err).__name__}: {err})") from None

    def tvm_target(self) -> tvm.target.Target:
        return tvm.target.Target(json.loads(self.target))

    def check_inputs(self, arrays: dict[str, np.ndarray], what: str) -> list[np.ndarray]:
        """``arrays`` (by input name) in the model's input order; a ``ValueError`` for a missing
        or extra name, or an array of the wrong shape or dtype."""
        names = [spec.name for spec in self.inputs]
        missing = [name for name in names if name not in arrays]
        extra = sorted(set(arrays) - set(names))
        if missing or extra:
            problem = (f"missing input(s) {', '.join(missing)}" if missing else "") + \
                ("; " if missing and extra else "") + (f"unknown input(s) {', '.join(extra)}" if extra else "")
            raise ValueError(f"{what}: {problem}; the model takes {self.describe_inputs()}")
        ordered = []
        for spec in self.inputs:
            array = np.asarray(arrays[spec.name])
            if list(array.shape) != spec.shape or str(array.dtype) != spec.dtype:
                raise ValueError(f"{what}: input {spec.name!r} is {array.dtype}{list(array.shape)}, "
                                 f"the model takes {spec.dtype}{spec.shape}")
            ordered.append(array)
        return ordered

    def describe_inputs(self) -> str:
        return ", ".join(f"{spec.name}: {spec.dtype}{spec.shape}" for spec in self.inputs)


def sidecar_path(library: str) -> str:
    return library + SIDECAR_SUFFIX


def input_specs(mod: tvm.IRModule) -> list[InputSpec]:
    """Name, static shape and dtype of every tensor input of ``mod["main"]``."""
    specs = []
    for param in mod["main"].params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise ValueError(f"input {param.name!r} is not a tensor of known shape ({ty})")
        try:
            shape = [int(d) for d in ty.shape.values]
        except TypeError:
            raise ValueError(f"input {param.name!r} has a dynamic shape {ty.shape}") from None
        specs.append(InputSpec(param.name, shape, str(ty.dtype)))
    return specs


def save_artifact(executable, path: str, artifact: Artifact) -> str:
    """Export ``executable`` to the shared library ``path`` and write its sidecar; returns the
    sidecar's path. On a DSA target the kernel models are read off the executable's C source."""
    target = artifact.tvm_target()
    if "dsa" in target.keys and artifact.dsa_kernel_models is None:
        from ..target_dsa.codegen import kernel_models

        artifact.dsa_kernel_models = kernel_models(executable)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"{path}: directory {directory} does not exist")
    executable.export_library(path)
    sidecar = sidecar_path(path)
    with open(sidecar, "w") as out:
        json.dump(artifact.to_json(), out, indent=2)
        out.write("\n")
    return sidecar


def load_artifact(path: str) -> tuple[tvm.runtime.Module, Artifact]:
    """The library at ``path`` (loaded) and its sidecar; ``ValueError``s for a missing or
    unreadable file, or a library for a device this machine lacks (a GPU library loads only
    where TVM has that GPU's runtime: :func:`~.build.target_device`)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    sidecar = sidecar_path(path)
    if not os.path.isfile(sidecar):
        raise ValueError(f"{path}: no sidecar {os.path.basename(sidecar)} beside it "
                         "(tvm-fusion compile writes both)")
    try:
        with open(sidecar) as f:
            data = json.load(f)
    except ValueError as err:
        raise ValueError(f"{sidecar}: not JSON ({err})") from None
    artifact = Artifact.from_json(data, sidecar)
    target_device(artifact.tvm_target())
    try:
        module = tvm.runtime.load_module(path)
    except Exception as err:  # noqa: BLE001 - the loader raises TVM errors of many kinds
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raise ValueError(f"{path}: cannot load the library ({lines[-1] if lines else type(err).__name__})") \
            from None
    return module, artifact


def read_inputs(path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, by name."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not an .npz input file ({err})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            return {name: data[name] for name in data.files}
    raise ValueError(f"{path}: one unnamed array; inputs go in an .npz file, by input name")

"""Compile and run helpers of the application layer (``cli/``, ``scripts/``, :mod:`.evaluation`,
:mod:`.artifacts`, :mod:`.training`), also the base of the test helpers in
:mod:`tvm_fusion_ext.testing.verify`.

* :func:`build` compiles a Relax module through a named fusion strategy (or any pass) for a target,
  :func:`instrumented` adds pass instruments to the compile in scope, :func:`cuda_graphs` makes a
  CUDA build in scope replay CUDA graphs; :func:`build_with_phases`
  also keeps the module after the strategy's fusion and after the schedule;
* :func:`run` runs a compiled module (on the device :func:`target_device` gives); :func:`random_inputs` makes random, never all-zero inputs
  for a function's tensor parameters;
* :func:`max_abs_error` and :func:`max_rel_error` measure output differences without asserting.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..pipelines import PHASE_PREFIX, fusion_pipeline, pipeline


def build(mod: tvm.IRModule, fusion: str | tvm.transform.Pass = "none", target="llvm",
          policy: str = "untuned", cost_check: bool = True) -> relax.VMExecutable:
    """Compile ``mod`` through strategy ``fusion`` (a registered name, with ``cost_check`` as for
    :func:`~tvm_fusion_ext.pipelines.pipeline`) or a complete pass."""
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    relax_pipeline = pipeline(fusion, target, policy, cost_check) if isinstance(fusion, str) else fusion
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)


def build_with_phases(mod: tvm.IRModule, fusion: str, target, policy: str = "untuned",
                      cost_check: bool = True) -> tuple[relax.VMExecutable, tvm.IRModule, tvm.IRModule]:
    """:func:`build`, and the module right after ``fusion``'s fusion stage (its kernels unscheduled)
    and right after the schedule phase."""
    captured = {}
    fused_phase, scheduled_phase = fusion_pipeline(fusion).info.name, PHASE_PREFIX + "schedule"

    @tvm.ir.instrument.pass_instrument
    class _Capture:
        def run_after_pass(self, module, info):
            if info.name in (fused_phase, scheduled_phase):
                captured[info.name] = module

    with instrumented(_Capture()):
        executable = build(mod, fusion, target, policy, cost_check)
    return executable, captured[fused_phase], captured[scheduled_phase]


def run(executable, inputs, func_name: str = "main", device=None) -> list[np.ndarray]:
    """Run ``func_name`` of a compiled module (or of a ``relax.VirtualMachine``, which keeps what
    earlier calls captured) on ``device`` (default the CPU), inputs copied there; returns its
    outputs flattened to a list of arrays."""
    device = device or tvm.cpu()
    vm = executable if isinstance(executable, relax.VirtualMachine) else relax.VirtualMachine(executable, device)
    result = vm[func_name](*[tvm.runtime.tensor(x, device) for x in inputs])
    return _flatten(result)


def target_device(target: tvm.target.Target) -> tvm.runtime.Device:
    """The device ``target``'s kernels run on (the host for ``llvm``, ``c`` and DSA targets); a
    ``ValueError`` when this machine has none, e.g. a CUDA target where ``tvm.cuda().exist`` is
    false (compile there with ``tvm-fusion compile``, run where the GPU is)."""
    device = tvm.device(target.get_target_device_type())
    if not device.exist:
        raise ValueError(f"target {target.kind.name}: no {device} on this machine to run on (or "
                         "this TVM build has no runtime for it); tvm-fusion compile builds for it "
                         "without one")
    return device


def random_inputs(func: relax.Function, seed: int = 0) -> list[np.ndarray]:
    """Random values for every tensor parameter of ``func`` (static shapes only), never all zeros.

    Floats are drawn from U(-1, 1) shifted away from 0; integers from [0, 8) with at least one 1.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise ValueError(f"parameter {param.name} has no static tensor type: {ty}")
        try:
            shape = [int(dim) for dim in ty.shape.values]
        except TypeError as err:
            raise ValueError(f"parameter {param.name} has a symbolic shape {ty.shape}") from err
        arrays.append(random_array(rng, shape, str(ty.dtype)))
    return arrays


def random_array(rng, shape, dtype: str, int_high: int = 8) -> np.ndarray:
    """One random array, never all zeros: floats from U(-1, 1) shifted away from 0, integers from
    [0, ``int_high``) with at least one 1."""
    if dtype.startswith(("float", "bfloat")):
        values = rng.uniform(-1.0, 1.0, size=shape)
        values = np.where(np.abs(values) < 1e-3, 0.5, values)
        return values.astype(dtype)
    if dtype == "bool":
        values = rng.integers(0, 2, size=shape).astype(bool)
        values.flat[0] = True
        return values
    values = rng.integers(0, int_high, size=shape).astype(dtype)
    values.flat[0] = 1
    return values


def _flatten(result) -> list[np.ndarray]:
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    if isinstance(result, (list, tuple)) or hasattr(result, "__len__"):
        out = []
        for item in result:
            out.extend(_flatten(item))
        return out
    return [np.asarray(result)]


def max_abs_error(actual, expected) -> float:
    """Largest absolute difference over all outputs (shapes must match; no tolerance applied)."""
    assert len(actual) == len(expected), f"{len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"output {i}: shape {a.shape} vs {e.shape}"
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype("float64") - e.astype("float64")))))
    return worst


def max_rel_error(actual, expected) -> float:
    """:func:`max_abs_error` of each output over that output's largest magnitude (worst output)."""
    assert len(actual) == len(expected), f"{len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for a, e in zip(actual, expected):
        scale = float(np.max(np.abs(np.asarray(e, dtype="float64")))) if np.size(e) else 0.0
        worst = max(worst, max_abs_error([a], [e]) / (scale if scale > 0 else 1.0))
    return worst


def instrumented(*instruments) -> tvm.transform.PassContext:
    """The current PassContext with ``instruments`` added."""
    return _current_context_with(instruments=instruments)


# The PassContext option that makes TVM's RewriteCUDAGraph (src/relax/transform/rewrite_cuda_graph.cc,
# in the CUDA backend's lowering) capture a function's static allocations and kernel launches.
USE_CUDA_GRAPH = "relax.backend.use_cuda_graph"


def cuda_graphs() -> tvm.transform.PassContext:
    """The current PassContext in which a CUDA build captures its static kernel launches into CUDA
    graphs: the VM allocates and launches them once, then replays the graph each call."""
    return _current_context_with(config={USE_CUDA_GRAPH: True})


def _current_context_with(instruments=(), config=None) -> tvm.transform.PassContext:
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=current.opt_level, config={**dict(current.config), **(config or {})},
                                     required_pass=list(current.required_pass),
                                     disabled_pass=list(current.disabled_pass),
                                     instruments=[*current.instruments, *instruments])

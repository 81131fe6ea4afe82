"""Side-by-side measurement of fusion strategies on one model (what ``tvm-fusion compare`` prints).

For every requested strategy the same Relax module is compiled under the same scheduling policy,
so fusion is the only difference between two rows. Each row reports

* ``kernels`` / ``boundary_bytes``: :func:`~tvm_fusion_ext.analysis.kernel_traffic.kernel_traffic` of
  the module after the strategy's :func:`~tvm_fusion_ext.pipelines.fusion_pipeline` (kernels per inference, bytes crossing them);
* ``compile_s``: wall time of the complete ``tvm.compile`` (:func:`.build.build`; under
  ``tuned`` the tuning itself is not included);
* ``latency_ms``: median of at least ``min_runs`` timed runs after warm-up;
* ``max_abs_err``: against the reference outputs (PyTorch eager for zoo models and saved
  ExportedPrograms, ONNX Runtime for ``.onnx`` files);
* ``speedup_vs_stock``: the ``stock`` row's latency over this row's (``None`` without a stock row);
  over several rounds, the median of the per-round ratios (each round times its rows together).

The reference rows ``torch`` (PyTorch eager), ``torch-compile`` (``torch.compile``, Inductor) and
``onnxruntime`` run the same model with the same thread count, on the target's device: on a GPU
target PyTorch runs on that GPU and ONNX Runtime with its CUDA execution provider. Their kernel and
byte fields are ``None``; ``compile_s`` is ``None`` for eager PyTorch and the compile (first call)
or session creation time otherwise.

``tuned`` tunes each strategy's own fused kernels with MetaSchedule (the same trial budget per
task for every strategy) before compiling with the records.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..analysis.kernel_traffic import kernel_traffic
from ..pipelines import POLICIES, fusion_names, fusion_pipeline, get_strategy
from ..tuning import tune_strategy, tuning_target
from .artifacts import bind_onnx_input_shapes, bind_relax_input_shapes
from .build import build, instrumented, max_abs_error, random_inputs, run, target_device
from .kernel_times import launches_per_run

REFERENCE_ROWS = ("torch", "torch-compile", "onnxruntime")
# The reference rows that commands add when no rows are named (torch.compile takes minutes on a CPU).
DEFAULT_REFERENCE_ROWS = ("torch", "onnxruntime")
# A model argument ending in one of these is a file (a missing one is "no such file").
MODEL_FILE_SUFFIXES = (".onnx", ".pt2", ".pt")


# ------------------------------------------------------------------------------------------------
# Workloads: a Relax module, its inputs and reference outputs, from a zoo name or a model file
# ------------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """What ``compare`` measures: a Relax module with inputs and reference outputs.

    ``torch_module`` (a callable on torch tensors) and ``onnx_model`` (a function returning ONNX
    bytes) are what the ``torch`` and ``onnxruntime`` reference rows run; either may be ``None``
    when the model's source cannot provide it.
    """

    name: str
    importer: str
    mod: tvm.IRModule
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    reference: str
    torch_module: Callable | None = None
    onnx_model: Callable[[], bytes] | None = None
    args: dict = field(default_factory=dict)


def load_workload(model: str, model_args: list[str] | None = None, importer: str | None = None,
                  seed: int = 0, input_shapes: dict[str, list[int]] | None = None) -> Workload:
    """A zoo model name, an ``.onnx`` file or a ``torch.export.save`` file, as a :class:`Workload`.

    ``importer`` is ``"torch"`` or ``"onnx"``; ``None`` picks the file's own format (``torch`` for
    zoo models). ``input_shapes`` (input name -> shape) binds a model file's dynamic input
    dimensions (:mod:`.artifacts`); a dimension left dynamic is an error naming the input.
    User mistakes raise ``ValueError`` with a one-line message.
    """
    from .. import zoo

    if importer not in (None, *zoo.IMPORTERS):
        raise ValueError(f"unknown import path {importer!r}; known: {', '.join(zoo.IMPORTERS)}")
    if model.endswith(MODEL_FILE_SUFFIXES) or os.path.isfile(model):
        if model_args:
            raise ValueError("--model-arg applies to zoo models only, not to model files")
        if not os.path.isfile(model):
            raise ValueError(f"{model}: no such file")
        if model.endswith(".onnx"):
            return _onnx_file_workload(model, importer, input_shapes)
        return _exported_program_workload(model, importer, input_shapes)
    if model not in zoo.MODELS:
        raise ValueError(f"unknown model {model!r} (not a zoo name or a file); zoo: "
                         f"{', '.join(zoo.model_names())}")
    if input_shapes:
        raise ValueError("--input-shapes applies to model files; zoo models take --model-arg")
    args = zoo.parse_model_args(model, model_args)
    built = zoo.load(model, args, seed)
    importer = importer or "torch"
    mod = _import(lambda: built.relax(importer), model)
    return Workload(model, importer, mod, built.numpy_inputs(), built.reference_outputs(), "torch",
                    torch_module=built.module, onnx_model=built.onnx_bytes, args=args)


def parse_model_spec(text: str) -> tuple[str, list[str]]:
    """``"name:key=value;key=value"`` (the benchmark scripts' model syntax) -> ``(name, ["key=value",
    ...])``, the zoo name and the arguments :func:`load_workload` takes."""
    name, _, assignments = text.strip().partition(":")
    return name, [a for a in assignments.split(";") if a]


def _onnx_file_workload(path: str, importer: str | None, input_shapes: dict | None) -> Workload:
    from ..zoo import frontends

    if importer == "torch":
        raise ValueError(f"{path}: an ONNX file can only be imported with --import onnx")
    model = bind_onnx_input_shapes(frontends.load_onnx_file(path), input_shapes, path)
    mod = _import(lambda: frontends.relax_from_onnx(model), path)
    inputs = random_inputs(mod["main"])
    data = model.SerializeToString()
    reference = _onnxruntime_session(data, [name for name, _, _ in frontends.onnx_input_specs(model)],
                                     inputs, threads=None)
    return Workload(path, "onnx", mod, inputs, reference(), "onnxruntime", onnx_model=lambda: data)


def _exported_program_workload(path: str, importer: str | None, input_shapes: dict | None) -> Workload:
    import torch

    from ..zoo import flatten_outputs, frontends

    program = frontends.load_exported_program(path)
    module = program.module()
    args, kwargs = program.example_inputs or ((), {})
    if kwargs:
        raise ValueError(f"{path}: keyword example inputs are not supported")
    importer = importer or "torch"
    if input_shapes and importer != "torch":
        raise ValueError(f"{path}: --input-shapes with a saved ExportedProgram needs the torch import")
    torch_inputs = tuple(args)
    if importer == "torch" or not torch_inputs:
        mod = bind_relax_input_shapes(_import(lambda: frontends.relax_from_exported_program(program), path),
                                      input_shapes, path)
        if not torch_inputs or input_shapes:   # inputs of the bound shapes
            torch_inputs = tuple(torch.from_numpy(x) for x in random_inputs(mod["main"]))
    names = [f"input{i}" for i in range(len(torch_inputs))]
    if importer == "onnx":
        mod = _import(lambda: frontends.relax_from_onnx(frontends.onnx_bytes(module, torch_inputs, names)), path)
    with torch.no_grad():
        expected = flatten_outputs(module(*torch_inputs))
    return Workload(path, importer, mod, [t.numpy() for t in torch_inputs], expected, "torch",
                    torch_module=module, onnx_model=lambda: frontends.onnx_bytes(module, torch_inputs, names))


def _import(fn: Callable[[], tvm.IRModule], what: str) -> tvm.IRModule:
    """Run an importer; its failures (unsupported op, bad graph) become one-line ``ValueError``s."""
    try:
        return fn()
    except tvm.error.OpNotImplemented as err:
        # from_onnx: "The following operators are not supported for frontend ONNX: A, B"
        raise ValueError(f"{what}: unsupported operator(s): {_first_line(err).rpartition(': ')[2]}") from None
    except ValueError as err:
        raise ValueError(f"{what}: import failed: {_first_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - frontends raise many unrelated types
        raise ValueError(f"{what}: import failed ({type(err).__name__}): {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    """The message line of an error (the last line when TVM prepends its own traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[-1] if any(line.startswith("Traceback") for line in lines) else lines[0]


# ------------------------------------------------------------------------------------------------
# Threads and timing
# ------------------------------------------------------------------------------------------------
def configure_threads(threads: int | None = None) -> int:
    """Use ``threads`` in TVM, PyTorch and ONNX Runtime; returns the count TVM really uses.

    The default is ``TVM_NUM_THREADS`` when set, else every logical CPU.

    TVM reads ``TVM_NUM_THREADS`` when its thread pool starts (lazily, at the first parallel
    kernel); without it TVM uses half the logical CPUs on x86. If the pool already runs with
    another count, that count is returned so every runtime still gets the same number.
    """
    threads = threads or int(os.environ.get("TVM_NUM_THREADS") or 0) or os.cpu_count() or 1
    os.environ["TVM_NUM_THREADS"] = str(threads)
    threads = int(tvm.get_global_func("runtime.NumThreads")())
    try:
        import torch
    except ImportError:
        return threads
    torch.set_num_threads(threads)
    return threads


def measure_latency_ms(fn: Callable[[], object], warmup: int = 3, min_runs: int = 20,
                       min_seconds: float = 0.5, max_runs: int = 1000) -> float:
    """Median wall time of ``fn()`` in ms: ``warmup`` untimed calls, then at least ``min_runs``
    timed calls (more, up to ``max_runs``, until about ``min_seconds`` have been spent)."""
    return measure_interleaved_ms({"fn": fn}, warmup, min_runs, min_seconds, max_runs)["fn"]


# Timed calls, at least, of each row in one turn of :func:`measure_interleaved_ms`.
INTERLEAVE_CALLS = 4


def measure_interleaved_ms(fns: dict[str, Callable[[], object]], warmup: int = 3, min_runs: int = 20,
                           min_seconds: float = 0.5, max_runs: int = 1000) -> dict[str, float]:
    """Median wall time in ms of every function of ``fns``, timed in turns (row A, row B, ...,
    row A, ...) rather than one after the other: a machine that changes speed while they are
    timed (a 2-core cloud host's frequency or neighbour load shifts within seconds) then slows
    every row alike, so ratios between rows hold. Each gets ``warmup`` untimed calls, then at
    least ``min_runs`` timed calls (more, up to ``max_runs``, until about ``min_seconds`` have
    been spent on it). Every row's calls are spread over the same turns, at least
    :data:`INTERLEAVE_CALLS` per row and turn: a row given more calls (its estimating call read
    fast) makes more per turn instead of timing the end of the round alone. Each turn starts
    with one untimed call: the first call after another row's turn pays for what that row left
    behind (another runtime's threads, its data in the caches); with PyTorch and ONNX Runtime
    rows, the row after ONNX Runtime's turn read up to 1.8x slower than a row with the same
    kernels."""
    runs = {}
    for name, fn in fns.items():
        for _ in range(max(warmup, 1)):
            fn()
        start = time.perf_counter()
        fn()
        estimate = time.perf_counter() - start
        runs[name] = max(min_runs, min(max_runs, math.ceil(min_seconds / max(estimate, 1e-9))))
    turns = max(1, min(runs.values(), default=0) // INTERLEAVE_CALLS)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for turn in range(1, turns + 1):
        for name, fn in fns.items():
            if len(fns) > 1:
                fn()
            # calls so far: this row's share of the turns done, rounded down (all by the last)
            for _ in range(runs[name] * turn // turns - len(samples[name])):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in samples.items()}


def machine_description(threads: int) -> str:
    """``"<cpu model>, <n> logical CPUs, <threads> threads, <os>"``."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {threads} threads, {platform.system()} {platform.release()}"


# ------------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One line of the comparison (the JSON row shape other tools read)."""

    fusion: str
    kernels: int | None
    boundary_bytes: int | None
    compile_s: float | None
    latency_ms: float
    max_abs_err: float
    speedup_vs_stock: float | None = None
    # On a DSA target: the simulator's profile (target_dsa.profile); latency_ms is its time_ms.
    dsa: dict | None = None
    # With several timing rounds: each round's median (latency_ms is their median).
    latency_rounds_ms: list[float] | None = None
    # On a GPU target: device kernels launched per inference (a PrimFunc may launch several).
    launches: int | None = None

    def to_json(self) -> dict:
        row = asdict(self)
        for key in ("dsa", "latency_rounds_ms", "launches"):
            if row[key] is None:
                del row[key]
        return row


@dataclass
class Report:
    model: str
    policy: str
    machine: str
    rows: list[Row]

    def to_json(self) -> dict:
        return {"model": self.model, "policy": self.policy, "machine": self.machine,
                "rows": [row.to_json() for row in self.rows]}

    def write_json(self, path: str) -> None:
        with open(path, "w") as out:
            json.dump(self.to_json(), out, indent=2)
            out.write("\n")

    def table(self) -> str:
        header = ["fusion", "kernels", "boundary MB", "compile s", "latency ms", "max abs err",
                  "speedup vs stock"]
        lines = [[row.fusion, _fmt(row.kernels, "d"), _fmt(row.boundary_bytes and row.boundary_bytes / 1e6, ".2f"),
                  _fmt(row.compile_s, ".1f"), _fmt(row.latency_ms, ".3f"), _fmt(row.max_abs_err, ".2e"),
                  _fmt(row.speedup_vs_stock, ".2f")] for row in self.rows]
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]

        def fmt(cells):
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def parse_fusions(text: str | list[str]) -> list[str]:
    """``"none,stock,torch"`` -> names, checked against the registry and the reference rows.

    ``all`` stands for every registered strategy, in registration order.
    """
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [name.strip() for name in names if name.strip()]
    names = list(dict.fromkeys(n for name in names for n in (fusion_names() if name == "all" else [name])))
    if not names:
        raise ValueError("no fusion strategy given")
    known = [*fusion_names(), *REFERENCE_ROWS]
    for name in names:
        if name not in known:
            raise ValueError(f"unknown fusion strategy {name!r}; known: {', '.join(known)}")
    return names


def parse_target(text: str | dict | tvm.target.Target) -> tvm.target.Target:
    """A target string (``llvm``, a tag) or its JSON dict form, as a ``Target``.

    A bare ``llvm`` (no ``mcpu``) means this machine: it gets the host CPU's ``mcpu``,
    so TVM's rows use the same vector instructions as the PyTorch and ONNX Runtime rows (TVM's own
    default is generic x86-64, i.e. SSE2 only).
    """
    if isinstance(text, tvm.target.Target):
        return text
    try:
        spec = json.loads(text) if isinstance(text, str) and text.lstrip().startswith("{") else text
        target = tvm.target.Target(spec)
    except Exception as err:  # noqa: BLE001 - Target raises ValueError or TVM FFI errors
        raise ValueError(f"bad target {text!r}: {_first_line(err)}") from None
    if target.kind.name == "llvm" and "mcpu" not in target.attrs:
        host_cpu = tvm.target.codegen.llvm_get_system_cpu()
        target = tvm.target.Target({**target.export(), "mcpu": host_cpu})
    return target


def compare(workload: Workload, fusions: list[str], target="llvm", policy: str = "untuned",
            threads: int | None = None, min_runs: int = 20, warmup: int = 3, trials_per_task: int = 32,
            work_dir: str | None = None, progress: bool | None = None, rounds: int = 1,
            cost_check: bool = True, timing_phase: contextlib.AbstractContextManager | None = None
            ) -> Report:
    """Measure every strategy in ``fusions`` (plus reference rows) on ``workload`` (``cost_check``
    as for :func:`~tvm_fusion_ext.pipelines.pipeline`).

    The rows are timed ``rounds`` times, interleaved within each round
    (:func:`measure_interleaved_ms`), and each row's latency is the median of its round medians,
    so that drift on a shared machine hits every row alike.
    ``timing_phase`` is entered once every row is compiled and left after the last timed run:
    several processes can compile at once and then time one after another (``scripts/bench_gpu.py``).
    """
    from tqdm import tqdm

    fusions = parse_fusions(fusions)
    target = parse_target(target)
    target_device(target)  # before any compile: a GPU target needs its GPU here
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
    threads = configure_threads(threads)
    if policy == "tuned":
        # MetaSchedule needs the core count; every TVM row compiles for this same target
        target = tuning_target(target, threads)
    disable = None if progress is None else not progress
    runners: dict[str, tuple[Callable, Row]] = {}
    for name in tqdm(fusions, desc="compile", unit="row", disable=disable, leave=False):
        if name in ("torch", "torch-compile"):
            runners[name] = _torch_row(workload, threads, target, compiled=name == "torch-compile")
        elif name == "onnxruntime":
            runners[name] = _onnxruntime_row(workload, threads, target)
        else:
            runners[name] = _tvm_row(workload, name, target, policy, trials_per_task, work_dir,
                                     cost_check)
    samples: dict[str, list[float]] = {name: [] for name in fusions}
    with timing_phase or contextlib.nullcontext():
        for _ in tqdm(range(max(rounds, 1)), desc="time", unit="round", disable=disable, leave=False):
            timed = {name: runners[name][0] for name in fusions if runners[name][1].dsa is None}
            for name, latency in measure_interleaved_ms(timed, warmup=warmup, min_runs=min_runs).items():
                samples[name].append(latency)
    rows = []
    for name in fusions:
        row = runners[name][1]
        row.latency_ms = row.dsa["time_ms"] if row.dsa is not None else statistics.median(samples[name])
        row.latency_rounds_ms = [round(v, 4) for v in samples[name]] if len(samples[name]) > 1 else None
        rows.append(row)
    stock = next((row for row in rows if row.fusion == "stock"), None)
    for row in rows:
        row.speedup_vs_stock = None if stock is None else speedup(
            stock.latency_ms, row.latency_ms, stock.latency_rounds_ms, row.latency_rounds_ms)
    return Report(workload.name, policy, machine_description(threads), rows)


def speedup(base_ms: float, row_ms: float, base_rounds=None, row_rounds=None) -> float:
    """A row's speed-up over a base row (``base_ms / row_ms``). With the latencies of both rows
    in the same rounds (``latency_rounds_ms``), the median of the per-round ratios: a host that
    changes speed between rounds moves both rows of a round alike, where the medians of two rows
    compare rounds on either side of the change."""
    if base_rounds and row_rounds and len(base_rounds) == len(row_rounds) > 1:
        return statistics.median(b / r for b, r in zip(base_rounds, row_rounds))
    return base_ms / row_ms


def _tvm_row(workload: Workload, name: str, target: tvm.target.Target, policy: str,
             trials_per_task: int, work_dir: str | None, cost_check: bool
             ) -> tuple[Callable, Row]:
    get_strategy(name)
    database = None
    if policy == "tuned":
        database = tune_strategy(workload.mod, name, target, trials_per_task,
                                 os.path.join(work_dir, name) if work_dir else None, cost_check)
    capture = _CaptureFused(name)
    start = time.perf_counter()
    with instrumented(capture), (database if database is not None else contextlib.nullcontext()):
        executable = build(workload.mod, name, target, policy, cost_check)
    compile_s = time.perf_counter() - start
    if capture.fused is None:
        raise RuntimeError(f"pipeline of {name!r} never ran its fusion stage {capture.pass_name!r}")
    traffic = kernel_traffic(capture.fused)
    device = target_device(target)
    error = max_abs_error(run(executable, workload.inputs, device=device), workload.expected)
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(x, device) for x in workload.inputs]
    main = vm["main"]
    row = Row(name, traffic.kernels, traffic.boundary_bytes, compile_s, math.nan, error)
    if "dsa" in target.keys:  # simulated, not timed on the host
        from ..target_dsa import profile

        row.dsa = profile(executable, workload.inputs, target)
    if "gpu" in target.keys:  # a GPU call returns before its kernels finish
        row.launches = launches_per_run(vm, args, device, executable)
        return (lambda: (main(*args), device.sync())), row
    return (lambda: main(*args)), row


@tvm.ir.instrument.pass_instrument
class _CaptureFused:
    """Keeps the module right after a strategy's fusion stage of the pipeline being compiled, so
    kernels and boundary bytes are read off exactly what gets compiled (no second pre-processing)."""

    def __init__(self, name: str):
        self.pass_name = fusion_pipeline(name).info.name
        self.fused = None

    def run_after_pass(self, mod, info):
        if info.name == self.pass_name:
            self.fused = mod


def _torch_row(workload: Workload, threads: int, target: tvm.target.Target, compiled: bool
               ) -> tuple[Callable, Row]:
    """PyTorch eager (or ``torch.compile``'d) on the target's device: a GPU target runs a copy of
    the module on ``cuda``, synchronising after each call as the TVM rows do."""
    import copy

    import torch

    from ..zoo import flatten_outputs

    name = "torch-compile" if compiled else "torch"
    if workload.torch_module is None:
        raise ValueError(f"{workload.name}: the {name} row needs a zoo model or a saved ExportedProgram")
    torch.set_num_threads(threads)
    module, inputs = workload.torch_module, [torch.from_numpy(x) for x in workload.inputs]
    sync = None
    if "gpu" in target.keys:
        if target.kind.name != "cuda" or not torch.cuda.is_available():
            raise ValueError(f"the {name} row on target {target.kind.name} needs PyTorch built for "
                             f"CUDA and a CUDA GPU (torch.cuda.is_available() is {torch.cuda.is_available()})")
        module = copy.deepcopy(module).to("cuda")
        inputs = [x.to("cuda") for x in inputs]
        sync = torch.cuda.synchronize
    if compiled:
        module = torch.compile(module)

    def call():
        with torch.no_grad():
            result = module(*inputs)
        if sync is not None:
            sync()
        return result

    start = time.perf_counter()
    error = max_abs_error(flatten_outputs(call()), workload.expected)
    compile_s = time.perf_counter() - start if compiled else None
    return call, Row(name, None, None, compile_s, math.nan, error)


def _onnxruntime_row(workload: Workload, threads: int, target: tvm.target.Target) -> tuple[Callable, Row]:
    if workload.onnx_model is None:
        raise ValueError(f"{workload.name}: the onnxruntime row needs a model that exports to ONNX")
    import onnx

    data = workload.onnx_model()
    graph = onnx.load_from_string(data).graph
    initializers = {init.name for init in graph.initializer}
    names = [value.name for value in graph.input if value.name not in initializers]
    start = time.perf_counter()
    call = _onnxruntime_session(data, names, workload.inputs, threads, gpu="gpu" in target.keys)
    compile_s = time.perf_counter() - start
    error = max_abs_error(call(), workload.expected)
    return call, Row("onnxruntime", None, None, compile_s, math.nan, error)


def _onnxruntime_session(data: bytes, names: list[str], inputs: list[np.ndarray],
                         threads: int | None, gpu: bool = False) -> Callable[[], list]:
    """A new ONNX Runtime session (on the CUDA execution provider with ``gpu``); the returned
    ``call()`` runs it on ``inputs``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    provider = "CUDAExecutionProvider" if gpu else "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        raise ValueError(f"the onnxruntime row on a GPU target needs onnxruntime-gpu ({provider} is not "
                         f"among {ort.get_available_providers()})")
    session = ort.InferenceSession(data, options, providers=[provider])
    feeds = dict(zip(names, inputs))
    return lambda: session.run(None, feeds)

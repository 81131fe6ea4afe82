"""NeoFlow's dynamic mode (neoflow-training-compilation section 6, Fig. 8 solution 3).

Start executing right away with moderate schedules, tune in the background, and swap each kernel
for a better version as soon as one is found, through a *function cache* shared by the tuning and
execution threads, so execution never waits for exploration (except for the first compile).

:class:`DynamicRunner` takes a fused Relax module (after ``FuseTIR``, e.g. from
``fusion_pipeline(strategy)``) and:

1. compiles each kernel (``call_tir``'d PrimFunc) on its own with the starting policy
   (``"untuned"``: the package's default schedule; ``"unscheduled"``: TVM's naive loops), measures
   it and puts it in the :class:`FunctionCache`;
2. rewrites ``main`` so that each ``call_tir`` becomes ``call_dps_packed`` of a global function that
   dispatches to the cache's current version of that kernel, and compiles it once for the VM;
3. :meth:`start_tuning` runs a background thread (the paper's exploration + code-generation
   threads folded into one): in rounds, MetaSchedule tunes each kernel for ``trials_per_round``
   trials (in-process builder and runner, no worker processes), builds the best schedule found so far,
   measures it on random inputs and offers it to the cache, which keeps it only if it is faster;
4. :meth:`run` executes ``main`` with whatever the cache holds at that moment.

The starting compile (step 1-2) is the only wait; MetaSchedule's one-time start-up (importing its
tensor intrinsics) runs in the tuning thread too, unless :meth:`DynamicRunner.warm_up` ran first. Both threads are Python threads: while the tuner
runs Python code (its builder and runner callbacks, the start-up import) the two share the GIL, so
early iterations are slower than with nothing in the background.

``cache.events`` records every swap (time, kernel, old and new latency); callers can see which
iteration ran with which version.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, tirx

from ..ir_utils import SCHEDULED_ATTR
from ..tuning.ms_builder import in_process_builder

_LOG = logging.getLogger(__name__)
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_IDS = itertools.count()

POLICIES = ("untuned", "unscheduled")
MEASURE_NUMBER = 10  # runs per latency measurement of one kernel
MEASURE_REPEAT = 3


@dataclass
class CacheEntry:
    """One kernel's current version: its compiled function, latency and where it came from."""

    function: object
    latency: float
    source: str
    version: int = 0
    keep_alive: object = None  # the runtime module owning ``function``


@dataclass
class SwapEvent:
    time: float
    kernel: str
    old_latency: float
    new_latency: float
    source: str


@dataclass
class FunctionCache:
    """Fig. 8's function cache: kernel name -> best compiled version so far (thread-safe)."""

    entries: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, name: str, entry: CacheEntry) -> None:
        with self.lock:
            self.entries[name] = entry

    def offer(self, name: str, entry: CacheEntry) -> bool:
        """Keep ``entry`` if it is faster than the cached version (section 6.2); True if swapped."""
        with self.lock:
            current = self.entries[name]
            if entry.latency >= current.latency:
                return False
            entry.version = current.version + 1
            self.entries[name] = entry
            self.events.append(SwapEvent(time.perf_counter(), name, current.latency, entry.latency,
                                         entry.source))
            return True

    def get(self, name: str) -> CacheEntry:
        with self.lock:
            return self.entries[name]


def kernels_of(mod: tvm.IRModule, func_name: str = "main") -> dict[str, tirx.PrimFunc]:
    """The PrimFuncs ``func_name`` calls through ``call_tir`` (without symbolic ``tir_vars``)."""
    found: dict[str, tirx.PrimFunc] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR) and len(expr.args) == 2:
            gvar = expr.args[0]
            found[gvar.name_hint] = mod[gvar]

    relax.analysis.post_order_visit(mod[func_name], visit)
    return found


def compile_kernel(func: tirx.PrimFunc, name: str, target: tvm.target.Target):
    """A callable runtime function for one PrimFunc, and the module that owns it."""
    func = func.with_attr("global_symbol", name)
    executable = tvm.compile(tvm.IRModule({name: func}), target=target)
    module = executable.jit() if hasattr(executable, "jit") else executable
    return module[name], module


def measure_kernel(module, name: str, func: tirx.PrimFunc, device=None) -> float:
    """Mean seconds of one call on random inputs (the same inputs for every version)."""
    device = device or tvm.cpu()
    rng = np.random.default_rng(0)
    args = []
    for param in func.params:
        ty = param.ty
        shape = [int(d) for d in ty.shape]
        dtype = str(ty.dtype)
        data = rng.uniform(-1, 1, size=shape).astype(dtype) if dtype.startswith("float") \
            else np.zeros(shape, dtype=dtype)
        args.append(tvm.runtime.tensor(data, device))
    timer = module.time_evaluator(name, device, number=MEASURE_NUMBER, repeat=MEASURE_REPEAT)
    return float(min(timer(*args).results))


class DynamicRunner:
    """Run a fused module while its kernels are tuned in the background (module docstring)."""

    def __init__(self, fused: tvm.IRModule, target: tvm.target.Target | str = "llvm",
                 policy: str = "untuned", func_name: str = "main"):
        if policy not in POLICIES:
            raise ValueError(f"unknown starting policy {policy!r}; expected one of {POLICIES}")
        self.target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
        self.func_name = func_name
        self.cache = FunctionCache()
        self.kernels = kernels_of(fused, func_name)
        self._prefix = f"tvm_fusion_ext.dynamic.{next(_IDS)}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tuning_error: BaseException | None = None
        start = self._schedule(policy)
        for name, func in start.items():
            function, module = compile_kernel(func, name, self.target)
            latency = measure_kernel(module, name, func)
            self.cache.put(name, CacheEntry(function, latency, policy, 0, module))
            tvm.register_global_func(f"{self._prefix}.{name}", self._dispatcher(name), override=True)
        self.vm = relax.VirtualMachine(tvm.compile(self._rewrite(fused), target=self.target),
                                       tvm.cpu())
        self.tuning_target = _with_num_cores(self.target)

    # ---- execution thread ----------------------------------------------------------------------
    def run(self, *inputs):
        """One execution of ``main`` with the cache's current kernels."""
        return self.vm[self.func_name](*inputs)

    def _dispatcher(self, name: str):
        cache = self.cache

        def call(*args):
            cache.get(name).function(*args)

        return call

    def _rewrite(self, fused: tvm.IRModule) -> tvm.IRModule:
        """``main`` with every cached kernel called through its dispatcher; those PrimFuncs gone."""
        prefix, names = self._prefix, set(self.kernels)

        @relax.expr_functor.mutator
        class _ToPacked(relax.PyExprMutator):
            def visit_call_(self, call):
                call = self.visit_expr_post_order(call)
                if call.op.same_as(_CALL_TIR) and len(call.args) == 2 \
                        and call.args[0].name_hint in names:
                    out_ty = call.ty if isinstance(call.ty, relax.TensorType) else list(call.ty.fields)
                    return relax.call_dps_packed(relax.ExternFunc(f"{prefix}.{call.args[0].name_hint}"),
                                                 call.args[1], out_ty)
                return call

        mod = tvm.IRModule({gv: f for gv, f in fused.functions_items()
                            if not (isinstance(f, tirx.PrimFunc) and gv.name_hint in names)},
                           attrs=fused.attrs)
        gvar = mod.get_global_var(self.func_name)
        mod[gvar] = _ToPacked().visit_expr(fused[self.func_name])
        return mod

    def _schedule(self, policy: str) -> dict[str, tirx.PrimFunc]:
        if policy == "unscheduled":
            return dict(self.kernels)
        from ..tir_passes.default_schedule import default_schedule_pass

        mod = tvm.IRModule({name: func for name, func in self.kernels.items()})
        with self.target:
            mod = default_schedule_pass(self.target)(mod)
        return {name: mod[name] for name in self.kernels}

    # ---- exploration + code generation thread -------------------------------------------------
    def start_tuning(self, trials_per_round: int = 8, rounds: int = 2, work_dir: str | None = None
                     ) -> threading.Thread:
        """Tune in a background thread; every round's best schedule is offered to the cache."""
        work_dir = work_dir or tempfile.mkdtemp(prefix="tvm_fusion_dynamic_")
        self._thread = threading.Thread(target=self._tune, args=(trials_per_round, rounds, work_dir),
                                        name="neoflow-dynamic-tuner", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        """Ask the tuner to stop after its current step and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the tuner to finish; True if it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @staticmethod
    def warm_up() -> float:
        """MetaSchedule's one-time start-up, in the calling thread; returns the seconds it took.

        ``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, which parses ~250 TVMScript functions
        (tens of seconds on a small machine). Without this call the tuning thread
        does it, concurrently with the loop.
        """
        start = time.perf_counter()
        import tvm.s_tir.tensor_intrin  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401

        return time.perf_counter() - start

    def _tune(self, trials_per_round: int, rounds: int, work_dir: str) -> None:
        self.warm_up()
        from tvm.s_tir import meta_schedule as ms

        databases = {name: ms.database.MemoryDatabase() for name in self.kernels}
        try:
            for round_index in range(rounds):
                # most expensive kernels first: they have the most to gain
                order = sorted(self.kernels, key=lambda n: -self.cache.get(n).latency)
                for name in order:
                    if self._stop.is_set():
                        return
                    func = self.kernels[name]
                    ms.tune_tir(func, self.tuning_target, os.path.join(work_dir, name), trials_per_round,
                                num_trials_per_iter=trials_per_round, builder=in_process_builder("candidate.so"),
                                runner=_in_process_runner(), database=databases[name],
                                cost_model=ms.cost_model.XGBModel(adaptive_training=False,
                                                                  num_warmup_samples=0),
                                strategy=ms.search_strategy.EvolutionarySearch(
                                    population_size=max(8, trials_per_round), genetic_num_iters=1),
                                num_tuning_cores=1, seed=round_index)
                    self._offer_best(name, func, databases[name], round_index)
        except BaseException as err:  # noqa: BLE001 - reported to the execution thread
            self.tuning_error = err
            _LOG.exception("dynamic-mode tuning failed")

    def _offer_best(self, name: str, func: tirx.PrimFunc, database, round_index: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        sch = ms.tir_integration.compile_tir(database, func, self.tuning_target)
        if sch is None:
            return
        tuned = sch.mod["main"].with_attr(SCHEDULED_ATTR, True)
        function, module = compile_kernel(tuned, name, self.target)
        latency = measure_kernel(module, name, tuned)
        swapped = self.cache.offer(name, CacheEntry(function, latency, f"tuned@{round_index}",
                                                    keep_alive=module))
        _LOG.info("kernel %s round %d: %.1f us (%s)", name, round_index, latency * 1e6,
                  "swapped in" if swapped else "kept the cached version")


def _with_num_cores(target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with ``num-cores`` (MetaSchedule requires it) from the hardware spec."""
    if target.kind.name != "llvm" or target.attrs.get("num-cores"):
        return target
    from ..hardware.spec import spec_for_target

    config = dict(target.export())
    config["num-cores"] = spec_for_target(target).num_cores
    return tvm.target.Target(config)


def _in_process_runner():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    @derived_object
    class InProcessRunner(PyRunner):
        """Loads each candidate here and times it with ``time_evaluator`` (no worker process)."""

        def run(self, runner_inputs):
            futures = []
            for runner_input in runner_inputs:
                try:
                    module = tvm.runtime.load_module(runner_input.artifact_path)
                    args = [tvm.runtime.tensor(np.random.uniform(-1, 1, [int(d) for d in info.shape])
                                               .astype(str(info.dtype)))
                            for info in runner_input.args_info]
                    timer = module.time_evaluator("main", tvm.cpu(),
                                                  number=MEASURE_NUMBER, repeat=1)
                    result = RunnerResult([float(t) for t in timer(*args).results], None)
                except Exception as err:  # noqa: BLE001 - reported as a failed measurement
                    result = RunnerResult(None, str(err))
                futures.append(RunnerFuture(f_done=lambda: True, f_result=lambda r=result: r))
            return futures

    return InProcessRunner()

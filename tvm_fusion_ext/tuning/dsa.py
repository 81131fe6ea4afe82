"""The DSA tuning driver: design space, simulated builder/runner, XGBoost (docs/dsa.md, "Tuning").

The design space of one kernel is the :class:`.schedule.Decisions` of the DSA staging schedule
(GraphTurbo sections 1 and 4.1): the output tile (only tiles whose staged working set fits LB),
the K chunk of a contraction, matrix unit on/off (GEMM-shaped contractions only), double
buffering (section 4.4) and the number of cores the tile loop is bound to. It is expressed the
way MetaSchedule's own rules express structural choices (e.g. ``meta_schedule.unroll_explicit``):

* :func:`sample_space` (the space function of a ``ScheduleFn`` space generator) samples one
  ``SampleCategorical`` per knob and annotates the kernel's output block with the sampled
  variables (``dsa.decision.<knob>``);
* :class:`DSAApplyDecisions` (postprocessor) reads the annotations, removes them and applies
  :func:`.schedule.stage_kernel` with those decisions (LB overflow spilled to GB exactly as the
  untuned schedule does), in place, after ``EnterPostproc``; so a database record replays
  (``MetaScheduleApplyDatabase`` replays postprocessor instructions too) and evolutionary search
  re-derives the schedule from mutated decisions;
* :class:`MutateDSADecision` (mutator) changes one sampled decision;
* :class:`SimBuilder` turns a scheduled kernel into its kernel model (:mod:`.kernel_model`), the
  only thing the simulator needs, written as JSON (no codegen, no popen pool, whose workers each spend ~23 s importing TVM's tensor intrinsics on a 2-core machine);
* :class:`SimRunner` returns the simulated time of one call of the kernel
  (:func:`.simulator.kernel_cycles` / clock); a kernel that does not fit LB/GB is an error;
* ``ms.cost_model.XGBModel`` over ``PerStoreFeature`` ranks candidates.

:func:`tune_kernels` tunes the kernels of a fused module one task at a time into a JSON database
(``work_dir``), seeds every kernel with the untuned default decisions (measured by the same
simulator, so the best record is never slower than the untuned schedule), and resumes as
:class:`.core.Resume` says.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import tempfile
from dataclasses import dataclass, replace

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.mutator import PyMutator
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

from ..target_dsa.intrinsics import register_matrix_intrin
from ..target_dsa.kernel_model import kernel_model
from ..target_dsa.schedule import (
    Decisions,
    Decline,
    contraction,
    default_decisions,
    evaluate,
    output_shape,
    stage_kernel,
    tile_candidates,
)
from ..target_dsa.simulator import fits, kernel_cycles
from ..target_dsa.spec import DSASpec
from ..target_dsa.target import spec_of_target
from ..tir_passes.analysis import divisors, sblocks
from .core import Resume, TaskReport, TuneReport, successful_secs, workload_key
from .ms_builder import (
    close_logger,
    only_tensor_intrinsics,
    progress_bar,
    quiet_meta_schedule,
    task_logger,
    trial_progress,
)

KNOBS = ("tile", "k_chunk", "matrix", "double_buffer", "cores")
ANNOTATION = "dsa.decision."
# Search limits of the design space (per kernel), in one place.
MAX_SPACE_TILES = 16
MAX_SPACE_K_CHUNKS = 4
_LOG = logging.getLogger(__name__)


# ---- the design space of one kernel ----------------------------------------------------------
@dataclass(frozen=True)
class KernelSpace:
    """Candidate values per knob; a point of the space is one index per knob."""

    tile: tuple[tuple[int, ...], ...]
    k_chunk: tuple[int | None, ...]
    matrix: tuple[bool, ...]
    double_buffer: tuple[bool, ...]
    cores: tuple[int, ...]
    default: Decisions

    def candidates(self, knob: str) -> tuple:
        return getattr(self, knob)

    def size(self) -> int:
        n = 1
        for knob in KNOBS:
            n *= len(self.candidates(knob))
        return n

    def decisions(self, choice: dict[str, int]) -> Decisions:
        """The :class:`Decisions` of one index per knob (a missing knob takes candidate 0)."""
        values = {knob: self.candidates(knob)[int(choice.get(knob, 0))] for knob in KNOBS}
        return Decisions(tile=values["tile"], k_chunk=values["k_chunk"], matrix=values["matrix"],
                         double_buffer=values["double_buffer"], cores=values["cores"])

    def index_of(self, decisions: Decisions) -> dict[str, int]:
        return {knob: self.candidates(knob).index(getattr(decisions, knob)) for knob in KNOBS}


_SPACES: dict[tuple, KernelSpace] = {}
_FINAL: dict[tuple, Decisions] = {}


def kernel_space(func: tirx.PrimFunc, spec: DSASpec) -> KernelSpace:
    """The design space of one kernel (memoised). Raises :class:`Decline` when the untuned
    schedule declines the kernel: such kernels are not tuned."""
    key = (tvm_ffi.structural_hash(func), spec)
    if key not in _SPACES:
        _SPACES[key] = _kernel_space(func, spec)
    return _SPACES[key]


def _kernel_space(func: tirx.PrimFunc, spec: DSASpec) -> KernelSpace:
    default = default_decisions(func, spec)
    shape = output_shape(func)
    info = contraction(func)
    gemm = spec.matrix_shape is not None and info is not None and info[1] == 1 and len(shape) >= 2
    chunks: list[int | None] = [None]
    if info is not None:
        proper = [d for d in range(info[0] - 1, 0, -1) if info[0] % d == 0]
        if gemm:  # chunks the matrix unit can take first
            proper.sort(key=lambda d: (d % spec.matrix_shape[2] != 0, -d))
        chunks += proper[:MAX_SPACE_K_CHUNKS]
    if default.k_chunk not in chunks:
        chunks.append(default.k_chunk)
    tiles: list[tuple[int, ...]] = []
    if gemm:
        m, n, _ = spec.matrix_shape
        lead = (1,) * (len(shape) - 2)
        tiles += sorted(((*lead, tm, tn) for tm in divisors(shape[-2]) if tm % m == 0
                         for tn in divisors(shape[-1]) if tn % n == 0),
                        key=lambda t: (-_prod(t), t))
    tiles += [t for t in tile_candidates(shape) if t not in tiles]
    # LB-fitting tiles: the smallest staged working set of a tile (smallest K chunk, no double
    # buffering) must fit LB; the untuned choice is always kept.
    smallest_chunk = min((c for c in chunks if c is not None), default=None)
    fitting = [default.tile]
    for tile in tiles:
        if len(fitting) >= MAX_SPACE_TILES:
            break
        if tile == default.tile:
            continue
        trial = Decisions(tile, smallest_chunk, False, False, spec.num_cores)
        try:
            if fits(kernel_model(stage_kernel(func, spec, trial).mod["main"]), spec):
                fitting.append(tile)
        except (Decline, s_tir.ScheduleError, ValueError):
            continue
    cores = sorted({spec.num_cores, max(1, spec.num_cores // 2), spec.cores_per_cluster},
                   reverse=True)
    return KernelSpace(tile=tuple(fitting), k_chunk=tuple(chunks),
                       matrix=(True, False) if gemm else (default.matrix,),
                       double_buffer=(True, False), cores=tuple(cores),
                       default=replace(default, spill=()))


def final_decisions(func: tirx.PrimFunc, spec: DSASpec, decisions: Decisions) -> Decisions:
    """``decisions`` plus the GB spills that make it fit, as :func:`.schedule.evaluate` derives
    them for the untuned schedule (memoised)."""
    key = (tvm_ffi.structural_hash(func), spec, decisions)
    if key not in _FINAL:
        _FINAL[key] = evaluate(func, spec, decisions)[2]
    return _FINAL[key]


def sample_decisions(sch: s_tir.Schedule, block, space: KernelSpace,
                     forced: dict[str, int] | None = None) -> None:
    """Sample one index per knob (``SampleCategorical``) and annotate ``block`` with it."""
    for knob in KNOBS:
        n = len(space.candidates(knob))
        if n < 2:
            continue
        decision = None if forced is None else forced[knob]
        rv = sch.sample_categorical(list(range(n)), [1.0 / n] * n, decision=decision)
        sch.annotate(block, ANNOTATION + knob, rv)


def apply_decisions(sch: s_tir.Schedule, spec: DSASpec) -> bool:
    """Replace the ``dsa.decision.*`` annotations by the staging schedule they select."""
    carrier, choice = None, {}
    for block in _non_root_blocks(sch.mod["main"]):
        anns = dict(block.annotations) if block.annotations is not None else {}
        found = {k[len(ANNOTATION):]: int(v) for k, v in anns.items() if k.startswith(ANNOTATION)}
        if found:
            carrier, choice = block.name_hint, found
            break
    if carrier is None:
        return False
    rv = sch.get_sblock(carrier)
    for knob in choice:
        sch.unannotate(rv, ANNOTATION + knob)
    func = sch.mod["main"]
    try:
        space = kernel_space(func, spec)
        decisions = final_decisions(func, spec, space.decisions(choice))
        stage_kernel(func, spec, decisions, sch=sch)
    except (Decline, s_tir.ScheduleError, ValueError, IndexError) as err:
        _LOG.debug("DSA decisions %s rejected: %s", choice, err)
        return False
    return True


# ---- MetaSchedule components -----------------------------------------------------------------
@derived_object
class DSAApplyDecisions(PyPostproc):
    """Postprocessor: apply the staging schedule the sampled decisions select."""

    def _initialize_with_tune_context(self, context) -> None:
        self.spec = spec_of_target(context.target)

    def apply(self, sch: s_tir.Schedule) -> bool:
        return apply_decisions(sch, self.spec)

    def clone(self) -> DSAApplyDecisions:
        return DSAApplyDecisions()


@derived_object
class MutateDSADecision(PyMutator):
    """Mutator: move one sampled DSA decision to another candidate."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = random.Random(seed)

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, trace, _rand_state=None):
        sampled = [inst for inst in trace.insts if inst.kind.name == "SampleCategorical"
                   and len(inst.attrs[0]) > 1 and trace.get_decision(inst) is not None]
        if not sampled:
            return None
        inst = self.rng.choice(sampled)
        current = int(trace.get_decision(inst))
        choice = self.rng.choice([i for i in range(len(inst.attrs[0])) if i != current])
        return trace.with_decision(inst, choice, remove_postproc=True)

    def clone(self) -> MutateDSADecision:
        return MutateDSADecision(self.rng.randrange(1 << 30))


def sample_space(sch: s_tir.Schedule, spec: DSASpec) -> None:
    """The space function: sample the DSA decisions on the kernel's output block."""
    sample_decisions(sch, carrier_block(sch), kernel_space(sch.mod["main"], spec))


def design_space(spec: DSASpec) -> ms.space_generator.ScheduleFn:
    """The DSA design space as a MetaSchedule space generator.

    A ``ScheduleFn`` rather than ``PostOrderApply`` with a schedule rule: ``PostOrderApply``
    skips the rules for blocks annotated ``schedule_rule`` (LegalizeOps puts
    ``meta_schedule.pool_max`` on pooling), so a pooling kernel would get no decisions.
    """
    return ms.space_generator.ScheduleFn(
        functools.partial(sample_space, spec=spec), sch_rules=[],
        postprocs=[DSAApplyDecisions()], mutator_probs={MutateDSADecision(): 1.0})


def simulate_model(model: dict, spec: DSASpec) -> float:
    """Simulated seconds of one call of a kernel; raises when it does not fit LB/GB."""
    if not fits(model, spec):
        raise ValueError(f"kernel does not fit: LB/GB footprint {model['footprint']}")
    return kernel_cycles(model, spec) / spec.clock_hz


@derived_object
class SimBuilder(PyBuilder):
    """Builder: the kernel model of each scheduled kernel as a JSON artifact (one dir each)."""

    def build(self, build_inputs):
        results = []
        for build_input in build_inputs:
            try:
                spec = spec_of_target(build_input.target)
                model = kernel_model(build_input.mod["main"])
                path = os.path.join(tempfile.mkdtemp(prefix="dsa_ms_"), "kernel_model.json")
                with open(path, "w") as f:
                    json.dump({"spec": spec.name, "model": model}, f)
                results.append(BuilderResult(path, None))
            except Exception as err:  # noqa: BLE001 - a failed build is a tuning result
                results.append(BuilderResult(None, f"{type(err).__name__}: {err}"))
        return results


@derived_object
class SimRunner(PyRunner):
    """Runner: the simulated time of one kernel call; ``measured`` counts simulations."""

    def __init__(self):
        self.measured = 0

    def run(self, runner_inputs):
        futures = []
        for runner_input in runner_inputs:
            self.measured += 1
            try:
                with open(runner_input.artifact_path) as f:
                    artifact = json.load(f)
                spec = spec_of_target(tvm.target.Target("dsa/" + artifact["spec"]))
                result = RunnerResult([simulate_model(artifact["model"], spec)], None)
            except Exception as err:  # noqa: BLE001 - a failed run is a tuning result
                result = RunnerResult(None, f"{type(err).__name__}: {err}")
            futures.append(RunnerFuture(f_done=lambda: True, f_result=lambda r=result: r))
        return futures


# ---- tuning driver -----------------------------------------------------------------------
def open_database(work_dir: str, target: tvm.target.Target) -> ms.database.JSONDatabase:
    """The JSON database in ``work_dir`` (created if missing). Records replay ``tensorize`` with
    the target's matrix intrinsic and loading parses them, so it is registered first."""
    spec = spec_of_target(target)
    if spec.matrix_shape is not None:
        register_matrix_intrin(tuple(spec.matrix_shape))
    os.makedirs(work_dir, exist_ok=True)
    return ms.database.JSONDatabase(work_dir=work_dir)


def tunable_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[list, list[str]]:
    """``(tasks, declined names)``: MetaSchedule tasks of a fused module that have a DSA space."""
    spec = spec_of_target(target)
    tasks, declined = [], []
    for task in ms.relax_integration.extract_tasks(mod, target):
        try:
            carrier_name(task.dispatched[0]["main"])
            kernel_space(task.dispatched[0]["main"], spec)
            tasks.append(task)
        except (Decline, s_tir.ScheduleError, ValueError) as err:
            _LOG.info("not tuned %s: %s", task.task_name, err)
            declined.append(task.task_name)
    return tasks, declined


def tune_kernels(mod: tvm.IRModule, target: tvm.target.Target, work_dir: str, trials: int, *,
                 num_trials_per_iter: int = 8, population_size: int = 16, seed: int = 0,
                 progress: bool = True) -> TuneReport:
    """Tune every kernel of the fused module ``mod`` with up to ``trials`` simulated
    measurements each, into the JSON database in ``work_dir`` (resumed if present)."""
    spec = spec_of_target(target)
    database = open_database(work_dir, target)
    tasks, declined = tunable_tasks(mod, target)
    resume = Resume(database, work_dir, trials)
    report = TuneReport(database, work_dir, trials, skipped=list(declined))
    remaining = {task.task_name: resume.remaining(task.dispatched[0]) for task in tasks}
    bar = progress_bar(sum(remaining.values()), progress)
    runner = SimRunner()
    builder = SimBuilder()
    cost_model = ms.cost_model.XGBModel(extractor=ms.feature_extractor.PerStoreFeature(),
                                        adaptive_training=False, num_warmup_samples=0,
                                        num_tuning_cores=1)
    quiet_meta_schedule(progress)
    for index, task in enumerate(tasks):
        workload_mod = task.dispatched[0]
        before = resume.records_before(workload_mod)
        left = remaining[task.task_name]
        measured_before = runner.measured
        if bar is not None:
            bar.set_description(task.task_name[:40])
        if left > 0 and before == 0:
            left -= 1
            if bar is not None:
                bar.update(1)
            if _commit_default(database, workload_mod, target, spec):
                runner.measured += 1
        if left > 0:
            logger = task_logger(work_dir, index, task.task_name)
            with only_tensor_intrinsics(()):  # the DSA space uses its own matrix intrinsic only
                context = ms.TuneContext(
                    mod=workload_mod, target=target, space_generator=design_space(spec),
                    search_strategy=ms.search_strategy.EvolutionarySearch(
                        population_size=population_size, init_measured_ratio=0.25,
                        init_min_unmeasured=max(2, population_size // 2), genetic_num_iters=2,
                        max_fail_count=3),
                    task_name=task.task_name, logger=logger, rand_state=seed + index,
                    num_threads=1)
            ms.tune_tasks(tasks=[context], task_weights=[1.0], work_dir=work_dir,
                          max_trials_global=left, max_trials_per_task=left,
                          num_trials_per_iter=min(num_trials_per_iter, left), builder=builder,
                          runner=runner, database=database, cost_model=cost_model,
                          measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                             trial_progress(bar)],
                          task_scheduler="round-robin")
            close_logger(logger)
        if remaining[task.task_name] > 0:
            # The search may stop short of the budget (a small space is exhausted); the kernel
            # is still done for this budget, so a resumed run does not search it again.
            resume.mark_done(workload_mod)
        report.tasks.append(_task_report(database, task, before, runner.measured - measured_before, spec))
    if bar is not None:
        bar.close()
    return report


def _commit_default(database, workload_mod: tvm.IRModule, target, spec: DSASpec) -> bool:
    """Measure the untuned default decisions with the simulator and commit them as a record
    (``False`` when they do not even fit LB/GB: then there is nothing to commit)."""
    func = workload_mod["main"]
    space = kernel_space(func, spec)
    sch = s_tir.Schedule(workload_mod)
    block = carrier_block(sch)
    sample_decisions(sch, block, space, forced=space.index_of(space.default))
    sch.enter_postproc()
    if not apply_decisions(sch, spec):
        return False
    try:
        secs = simulate_model(kernel_model(sch.mod["main"]), spec)
    except ValueError as err:
        _LOG.info("untuned schedule not committed: %s", err)
        return False
    workload = database.commit_workload(workload_mod)
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, [secs], target, ms.arg_info.ArgInfo.from_prim_func(func)))
    return True


def _task_report(database, task, before: int, measured: int, spec: DSASpec) -> TaskReport:
    workload_mod = task.dispatched[0]
    space = kernel_space(workload_mod["main"], spec)
    default_choice = _sampled(space, space.index_of(space.default))
    default_secs = best_secs = best = None
    for record in database.get_all_tuning_records():
        if workload_key(record.workload.mod) != workload_key(workload_mod):
            continue
        secs = successful_secs(record)
        if secs is None:
            continue
        choice = _trace_choice(record.trace)
        if choice == default_choice:
            default_secs = secs
        if best_secs is None or secs < best_secs:
            best_secs, best = secs, space.decisions(choice)
    return TaskReport(task.task_name, before, measured, best_secs, default_secs=default_secs, best=best)


def _sampled(space: KernelSpace, choice: dict[str, int]) -> dict[str, int]:
    """The part of ``choice`` a trace records (knobs with more than one candidate)."""
    return {k: v for k, v in choice.items() if len(space.candidates(k)) > 1}


def _trace_choice(trace) -> dict[str, int]:
    """Knob -> sampled index, read from the annotations of a DSA trace."""
    values = {}
    decisions = {}
    for inst in trace.insts:
        if inst.kind.name == "SampleCategorical":
            decisions[inst.outputs[0]] = int(trace.get_decision(inst))
        elif inst.kind.name == "Annotate" and str(inst.attrs[0]).startswith(ANNOTATION):
            value = inst.inputs[1]
            if value in decisions:
                values[str(inst.attrs[0])[len(ANNOTATION):]] = decisions[value]
    return values


def carrier_name(func: tirx.PrimFunc) -> str:
    """The block that carries the sampled decisions: the one writing the kernel's output."""
    params = {p.name for p in func.params}
    for block in _non_root_blocks(func):
        if block.writes and block.writes[0].source.name in params:
            return block.name_hint
    raise Decline("no block writes a kernel output")


def _non_root_blocks(func: tirx.PrimFunc) -> list:
    return [b for b in sblocks(func) if b.name_hint != "root"]


def carrier_block(sch: s_tir.Schedule):
    return sch.get_sblock(carrier_name(sch.mod["main"]))


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out

"""Kernel-by-kernel differential check of a strategy's build: every scheduled kernel, run alone on
random inputs on the target's device, against the same kernel before scheduling (as the strategy's
fusion stage made it) compiled for the host CPU. Where a whole model's outputs disagree, this names
the kernel whose schedule is wrong (``scripts/check_kernels.py``).

Without the target's device (a CUDA target on a machine with no GPU), a scheduled kernel can run
on the host instead, its thread-bound loops made serial (:func:`threads_as_serial_loops`). A
schedule keeps its function's sequential meaning, so this catches a schedule that computes the
wrong thing (a block left uncomputed or computed at the wrong indices), though not what only
parallel execution shows (races, a missing synchronisation) or what the GPU lowering gets wrong."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, tirx

from ..tir_passes.analysis import sblocks
from ..tir_passes.gpu_rules import written_params
from .build import build_with_phases, max_rel_error, random_array, target_device
from .kernel_times import called_kernels


@dataclass(frozen=True)
class KernelCheck:
    """One kernel: its name (after scheduling), the largest error of its outputs relative to each
    output's largest magnitude, and the failure when it did not build or run."""

    name: str
    rel_error: float | None
    failure: str = ""


def check_kernels(mod: tvm.IRModule, fusion: str, target: tvm.target.Target, seed: int = 0,
                  policy: str = "untuned", on_host: bool = False) -> list[KernelCheck]:
    """Every kernel ``fusion``'s build of ``mod`` for ``target`` calls, checked alone (see the
    module docstring); with ``on_host`` the scheduled kernels run on the host CPU with their
    thread loops serial. Integer inputs are drawn from {0, 1}, valid indices for any gather."""
    _, fused_mod, scheduled_mod = build_with_phases(mod, fusion, target, policy)
    if on_host:
        target, device = tvm.target.Target("llvm"), tvm.cpu()
    else:
        device = target_device(target)
    pairs = dict(zip(called_kernels(scheduled_mod), called_kernels(fused_mod)))
    rng = np.random.default_rng(seed)
    results = []
    for scheduled_name, fused_name in pairs.items():
        scheduled, reference = scheduled_mod[scheduled_name], fused_mod[fused_name]
        try:
            if on_host:  # a kernel TVM's legalisation already bound to threads is so before scheduling too
                scheduled, reference = threads_as_serial_loops(scheduled), threads_as_serial_loops(reference)
            results.append(KernelCheck(scheduled_name, compare_kernel(scheduled, reference, target, device, rng)))
        except Exception as err:  # noqa: BLE001 - report the kernel and go on with the next
            results.append(KernelCheck(scheduled_name, None, f"{type(err).__name__}: {str(err).splitlines()[0]}"))
    return results


def compare_kernel(scheduled: tirx.PrimFunc, reference: tirx.PrimFunc, target, device, rng) -> float:
    """The largest relative error of ``scheduled`` on ``target`` against ``reference`` on the host
    CPU, on the same random inputs (integers drawn from {0, 1})."""
    buffers = list(reference.params)
    outputs = {i for i, param in enumerate(buffers) if any(param.same_as(w) for w in written_params(reference))}
    shapes = [[int(d) for d in buf.shape] for buf in buffers]
    arrays = [np.zeros(shape, buf.dtype) if i in outputs else random_array(rng, shape, buf.dtype, int_high=2)
              for i, (buf, shape) in enumerate(zip(buffers, shapes))]
    expected = _run(reference, "llvm", tvm.cpu(), arrays)
    actual = _run(scheduled, target, device, arrays)
    return max_rel_error([actual[i] for i in sorted(outputs)], [expected[i] for i in sorted(outputs)])


def _run(func: tirx.PrimFunc, target, device, arrays) -> list[np.ndarray]:
    lib = tvm.compile(tvm.IRModule({"kernel": func.with_attr("global_symbol", "kernel")}), target=target)
    args = [tvm.runtime.tensor(a, device) for a in arrays]
    lib["kernel"](*args)
    device.sync()
    return [a.numpy() for a in args]


# Storage scopes the host CPU has no memory for; their buffers become ``global`` there.
GPU_ONLY_SCOPES = ("shared", "shared.dyn", "warp")


def threads_as_serial_loops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every thread-bound loop (``blockIdx``, ``threadIdx``, ``vthread``) made a
    serial loop and its shared-memory buffers global, so a GPU schedule compiles for and runs on
    the host CPU in its sequential order."""
    sch = s_tir.Schedule(func.with_body(_serial(func.body)))
    for block in sblocks(sch.mod["main"]):
        for index, region in enumerate(block.writes):
            if region.source.scope() in GPU_ONLY_SCOPES:
                sch.set_scope(sch.get_sblock(block.name_hint), index, "global")
    return sch.mod["main"]


def _serial(stmt):
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_serial(child) for child in stmt.seq])
    if isinstance(stmt, tirx.For):
        kind = tirx.ForKind.SERIAL if stmt.kind == tirx.ForKind.THREAD_BINDING else stmt.kind
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, kind, _serial(stmt.body), None,
                        stmt.annotations, stmt.step)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, s_tir.SBlock(
            block.iter_vars, block.reads, block.writes, block.name_hint, _serial(block.body),
            block.init and _serial(block.init), block.alloc_buffers, block.match_buffers,
            block.annotations))
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _serial(stmt.then_case),
                               stmt.else_case and _serial(stmt.else_case))
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _serial(stmt.body))
    return stmt

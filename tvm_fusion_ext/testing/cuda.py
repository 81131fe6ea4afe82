"""Helpers for the CUDA backend's tests: zoo models built for ``sm_90`` (kept scheduled module and
executable), the kernels through TVM's s_tir lowering, and the generated CUDA source per kernel.
Everything here runs without a GPU: ``nvcc`` and a TVM built with CUDA are enough
(:data:`MISSING` says which of them is absent)."""

from __future__ import annotations

import functools
import re
import shutil

import tvm
from tvm import s_tir, tirx

from .. import zoo
from ..driver.build import build_with_phases
from ..driver.kernel_times import CUDA_KERNEL_HEAD, device_sources

TARGET = {"kind": "cuda", "arch": "sm_90"}
# TVM's GPU verifier with the H100's limits (CUDA C++ Programming Guide, compute capability 9.0).
# Shared memory: dlight declares static ``__shared__`` arrays, which CUDA caps at 48 KB per block;
# only dynamic shared memory may grow to 227 KB.
H100_LIMITS = {"max_shared_memory_per_block": 48 * 1024, "max_threads_per_block": 1024,
               "max_thread_x": 1024, "max_thread_y": 1024, "max_thread_z": 64, "max_vthread": 8,
               "max_vector_bytes": 16}
MISSING = [what for what, absent in (
    ("nvcc on PATH", shutil.which("nvcc") is None),
    ("a TVM built with CUDA (USE_CUDA)", str(tvm.support.libinfo().get("USE_CUDA", "OFF")).upper()
     in ("OFF", "", "0", "FALSE")),
) if absent]


@functools.cache
def zoo_model(name: str):
    """Zoo model ``name`` at its small test size (:data:`tvm_fusion_ext.zoo.SMALL_ARGS`)."""
    return zoo.load(name, zoo.SMALL_ARGS[name])


@functools.cache
def build_for_cuda(name: str, fusion: str, cost_check: bool = True):
    """(scheduled module, executable) of zoo model ``name`` under ``fusion`` for sm_90
    (``cost_check`` as for :func:`~tvm_fusion_ext.driver.build.build`)."""
    executable, _, scheduled = build_with_phases(zoo_model(name).relax("torch"), fusion,
                                                 tvm.target.Target(TARGET), cost_check=cost_check)
    return scheduled, executable


def kernels(mod: tvm.IRModule) -> dict:
    """Name -> PrimFunc of every kernel of ``mod``."""
    return {gv.name_hint: func for gv, func in mod.functions_items() if isinstance(func, tirx.PrimFunc)}


def lowered(mod: tvm.IRModule) -> dict:
    """The scheduled kernels through TVM's s_tir lowering (``python/tvm/s_tir/pipeline.py``), where
    thread extents and shared allocations (cross-thread reductions included) are explicit."""
    target = tvm.target.Target(TARGET)
    lower, _, _ = s_tir.pipeline.default_s_tir_pipeline()
    named = {name: func.with_attr("global_symbol", name).with_attr("target", target)
             for name, func in kernels(mod).items()}
    with target:
        return kernels(lower(tvm.IRModule(named)))


def cuda_source(executable) -> str:
    """The CUDA source of every CUDA module in ``executable``."""
    source = device_sources(executable)
    assert source, "no CUDA module in the executable: every kernel was compiled for the host"
    return source


def kernel_bodies(source: str) -> dict[str, str]:
    """Kernel name -> its CUDA definition (declarations skipped)."""
    heads = list(CUDA_KERNEL_HEAD.finditer(source))
    return {m.group(1): source[m.start():heads[i + 1].start() if i + 1 < len(heads) else len(source)]
            for i, m in enumerate(heads)}


def launches(bodies: dict[str, str], kernel: str) -> dict[str, str]:
    """The CUDA kernels TVM's ``SplitHostDevice`` made of PrimFunc ``kernel``: ``<kernel>_kernel``,
    ``<kernel>_kernel_1``, ..."""
    return {name: body for name, body in bodies.items() if re.fullmatch(kernel + r"_kernel(_\d+)?", name)}

"""Matrix-unit intrinsic: a contraction tile mapped to the MME (GraphTurbo section 5, CU3).

A GEMM-shaped reduction block ``C[.., i, j] += A[.., i, k] * B[.., k, j]`` whose tile extents
are multiples of the matrix unit's instruction shape ``(M, N, K)`` is tensorized with
``dsa_mme_gemm_<M>x<N>x<K>``: the description is the scalar update, the implementation one
``call_extern("dsa_mme_gemm_f32", C, A, B, ldc, lda, ldb, M, N, K)``. The C codegen
(:mod:`.codegen`) defines that function, so the host emulation computes the same numbers; the
simulator charges ``M * N * K`` operations to the matrix unit per call. Shapes that do not divide
stay on the vector MAC unit.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.script import tirx as T

from ..tir_passes.analysis import block_names
from .kernel_model import MATRIX_CALL_PREFIX, TILE
from .layer_windows import LayerWindows
from .spec import DSASpec
from .tir_helpers import LB, vars_in

_LOG = logging.getLogger(__name__)

_REGISTERED: set[str] = set()


def intrin_name(shape: tuple[int, int, int]) -> str:
    m, n, k = shape
    return f"{MATRIX_CALL_PREFIX}_{m}x{n}x{k}_f32"


def register_matrix_intrin(shape: tuple[int, int, int]) -> str:
    """Register (once) the float32 GEMM tensor intrinsic for one matrix-unit shape."""
    name = intrin_name(shape)
    if name in _REGISTERED:
        return name
    m, n, k = shape

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (m, k), "float32", offset_factor=1, scope=LB)
        B = T.match_buffer(b, (k, n), "float32", offset_factor=1, scope=LB)
        C = T.match_buffer(c, (m, n), "float32", offset_factor=1, scope=LB)
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:k, 0:n])
            T.writes(C[0:m, 0:n])
            for i, j, r in T.grid(m, n, k):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, r])
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle):
        lda = T.int32()
        ldb = T.int32()
        ldc = T.int32()
        A = T.match_buffer(a, (m, k), "float32", offset_factor=1, scope=LB,
                           strides=[lda, 1])
        B = T.match_buffer(b, (k, n), "float32", offset_factor=1, scope=LB,
                           strides=[ldb, 1])
        C = T.match_buffer(c, (m, n), "float32", offset_factor=1, scope=LB,
                           strides=[ldc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:k, 0:n])
            T.writes(C[0:m, 0:n])
            T.evaluate(T.call_extern("int32", "dsa_mme_gemm_f32", C.access_ptr("rw"),
                                     A.access_ptr("r"), B.access_ptr("r"), T.Cast("int32", ldc),
                                     T.Cast("int32", lda), T.Cast("int32", ldb),
                                     m, n, k))

    s_tir.TensorIntrin.register(name, desc, impl, override=True)
    _REGISTERED.add(name)
    return name


def loop_iter_types(sch: s_tir.Schedule, block_rv) -> dict[str, int]:
    """Loop variable name -> iter type (0 spatial, 2 reduce) of the block var it feeds."""
    realize = _realize(sch, block_rv)
    out = {}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        for var in vars_in(value):
            out[var.name] = max(out.get(var.name, 0), int(iv.iter_type))
    return out


def tensorize_contractions(sch: s_tir.Schedule, spec: DSASpec) -> s_tir.Schedule:
    """Map every GEMM-shaped reduction whose tile divides the MME shape to the matrix unit.

    Each attempt runs on a copy of the schedule (random variables stay valid in copies) first;
    only when it succeeds is it repeated on ``sch`` itself, so ``sch`` is modified in place (a
    MetaSchedule postprocessor must change the schedule it is given) and a traced schedule
    records only instructions that succeed.
    """
    shape = spec.matrix_shape
    if shape is None:
        return sch
    for name in block_names(sch.mod["main"]):
        roles = _gemm_roles(sch, sch.get_sblock(name))
        if roles is None:
            continue
        trial = sch.copy()
        if _tensorize_one(trial, trial.get_sblock(name), roles, shape):
            _tensorize_one(sch, sch.get_sblock(name), roles, shape)
    return sch


def tensorize_func(func: tirx.PrimFunc, spec: DSASpec, loop_var=None,
                   windows: bool = True) -> tirx.PrimFunc:
    """:func:`tensorize_contractions` over a whole PrimFunc without trial copies
    (``Schedule.copy`` fails after a ``tensorize`` in functions holding several; block names
    must be unique). The GEMM blocks are found in one walk first; each attempt starts from the
    function as the last success left it, on a :class:`.layer_windows.LayerWindows` window of
    the sequence holding the kernel's layers (the body of the root loop over ``loop_var``, or
    the root's): a schedule of a whole stitched sub-graph kernel is costly to create and to
    change (its cost grows with the function). ``windows=False`` schedules the whole function
    for each attempt (the same result)."""
    shape = spec.matrix_shape
    if shape is None:
        return func
    realizes = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)])
    staged = LayerWindows(func, loop_var, windows)

    def attempt(sch, rvs, whole):
        roles = _gemm_roles(sch, rvs[0])
        inner = None if roles is None else _role_loops(sch, rvs[0], roles, shape)
        return sch if inner is not None and _tensorize_loops(sch, rvs[0], inner, shape) else None

    for name in [r.block.name_hint for r in realizes if _gemm_roles_of(r) is not None]:
        staged.stage([name], attempt)
    return staged.func


def _gemm_roles(sch, rv):
    """Loop vars feeding (i, j, k) of ``C[.., i, j] += A[.., i, k] * B[.., k, j]`` (float32)."""
    return _gemm_roles_of(_realize(sch, rv))


def _gemm_roles_of(realize):
    """:func:`_gemm_roles` of one block realize."""
    block = realize.block
    body = block.body
    if not isinstance(body, tirx.BufferStore) or str(body.buffer.dtype) != "float32":
        return None
    value = body.value
    if not (isinstance(value, tirx.Add) and isinstance(value.b, tirx.Mul)
            and isinstance(value.a, tvm.ir.TensorLoad) and value.a.source.same_as(body.buffer)):
        return None
    a, b = value.b.a, value.b.b
    if not (isinstance(a, tvm.ir.TensorLoad) and isinstance(b, tvm.ir.TensorLoad)):
        return None
    ivars = {iv.var.name: iv for iv in block.iter_vars}
    c_idx = [i for i in body.indices]
    if len(c_idx) < 2 or not all(isinstance(i, tvm.ir.Var) for i in c_idx[-2:]):
        return None
    vi, vj = c_idx[-2].name, c_idx[-1].name
    a_idx, b_idx = list(a.indices), list(b.indices)
    if len(a_idx) < 2 or len(b_idx) < 2 or not all(isinstance(x, tvm.ir.Var) for x in a_idx[-2:] + b_idx[-2:]):
        return None
    if a_idx[-2].name != vi or b_idx[-1].name != vj or a_idx[-1].name != b_idx[-2].name:
        return None
    vk = a_idx[-1].name
    if ivars.get(vk) is None or ivars[vk].iter_type != 2 or sum(iv.iter_type == 2 for iv in block.iter_vars) != 1:
        return None
    if any(level != LB for level in (a.source.scope(), b.source.scope())):
        return None
    binding = {iv.var.name: value for iv, value in zip(block.iter_vars, realize.iter_values)}
    roles = {}
    for role, var in (("i", vi), ("j", vj), ("k", vk)):
        loop_vars = [v.name for v in vars_in(binding[var])]
        roles[role] = loop_vars
    return roles


def _tensorize_one(sch, rv, roles, shape) -> bool:
    """Split the innermost loop of each role by the MME shape and tensorize."""
    inner = _role_loops(sch, rv, roles, shape)
    return inner is not None and _tensorize_loops(sch, rv, inner, shape)


def _role_loops(sch, rv, roles, shape) -> dict | None:
    """The innermost loop of each role (``i``, ``j``, ``k``), when each extent is a constant
    multiple of the MME shape; ``None`` otherwise. Changes nothing."""
    loops = sch.get_loops(rv)
    by_var = {sch.get(lp).loop_var.name: lp for lp in loops}
    inner = {}
    for role, size in zip("ijk", shape):
        candidates = [by_var[v] for v in roles[role] if v in by_var]
        if not candidates:
            return None
        loop = candidates[-1]
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm) or extent.value % size:  # symbolic: no fixed split
            return None
        inner[role] = loop
    return inner


def _tensorize_loops(sch, rv, inner, shape) -> bool:
    """Split ``inner`` (:func:`_role_loops`) by the MME shape and tensorize; on ``False`` the
    schedule may hold the splits made before the failure."""
    try:
        parts = {}
        for role, size in zip("ijk", shape):
            extent = int(sch.get(inner[role]).extent)
            parts[role] = sch.split(inner[role], [extent // size, size])
        sch.reorder(parts["i"][0], parts["j"][0], parts["k"][0], parts["i"][1], parts["j"][1],
                    parts["k"][1])
        # Initialise the accumulator once per tile: below the tile loop (the first loop, or the
        # one annotated as such below an instance loop), above any K chunk loop.
        loops = sch.get_loops(rv)
        tiles = [p for p, lp in enumerate(loops) if TILE in (sch.get(lp).annotations or {})]
        sch.decompose_reduction(rv, loops[(tiles[-1] if tiles else 0) + 1])
        sch.tensorize(parts["i"][1], register_matrix_intrin(shape))
        return True
    except (s_tir.ScheduleError, ValueError, RuntimeError) as err:
        _LOG.debug("matrix unit declined: %s", err)
        return False


def _realize(sch, rv):
    name = sch.get(rv).name_hint
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(s_tir.SBlockRealize, found.append)])
    return next(r for r in found if r.block.name_hint == name)

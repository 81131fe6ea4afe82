"""Matrix-unit intrinsic: a contraction tile mapped to the MME (GraphTurbo section 5, CU3).

A GEMM-shaped reduction block ``C[.., i, j] += A[.., i, k] * B[.., k, j]`` whose tile extents
are multiples of the matrix unit's instruction shape ``(M, N, K)`` is tensorized with
``dsa_mme_gemm_<M>x<N>x<K>``: the description is the scalar update, the implementation one
``call_extern("dsa_mme_gemm_f32", C, A, B, ldc, lda, ldb, M, N, K)``. The C codegen
(:mod:`.codegen`) defines that function, so the host emulation computes the same numbers; the
simulator charges ``M * N * K`` operations to the matrix unit per call. Shapes that do not divide
stay on the vector MAC unit.

A stride-1 NCHW convolution ``C[n, f, y, x] += X[n, c, y + r, x + s] * W[f, c, r, s]`` whose
operands are staged in LB is a sum over ``(r, s)`` of such GEMMs (:class:`ConvOperands`): per
output row ``y`` and kernel tap ``(r, s)``, ``C[f, x] += W[f, c] * X[c, x + s]``, with ``f`` as
the matrix unit's rows, ``x`` its columns and ``c`` its reduction. The LB copies are laid out so
that each GEMM's operands are row-major matrices (``X`` and ``C`` as ``[n, y, c, x]``, ``W`` as
``[r, s, f, c]``; the DMA filling or draining them reorders the data), and the instruction's
column count is the largest divisor of the row width that the unit holds (:func:`conv_columns`):
a call over fewer columns than the unit has still occupies one instruction.

A convolution of stride ``S`` reads ``X[n, c, y * S + r, x * S + s]``: its LB copy of ``X`` is laid
out in ``S`` phases of each row (``[n, y, x % S, c, x // S]``), so that per tap ``(r, s)`` the
columns ``x`` it reads, ``x + s // S`` of phase ``s % S``, are again contiguous and each GEMM's
``X`` operand a row-major matrix.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.script import tirx as T

from ..tir_passes.analysis import block_names
from .kernel_model import MATRIX_CALL_PREFIX, TILE
from .layer_windows import LayerWindows
from .partial_tiles import instruction_shape, outruns_vector_mac, split_partial_tiles
from .spec import DSASpec
from .tir_helpers import LB, new_schedule, vars_in

_LOG = logging.getLogger(__name__)

_REGISTERED: set[str] = set()


def intrin_name(shape: tuple[int, int, int]) -> str:
    m, n, k = shape
    return f"{MATRIX_CALL_PREFIX}_{m}x{n}x{k}_f32"


def register_matrix_intrin(shape: tuple[int, int, int], swapped: bool = False) -> str:
    """Register (once) the float32 GEMM tensor intrinsic for one matrix-unit shape; ``swapped``:
    the block multiplies ``B * A`` (a convolution's input times its weight) instead of ``A * B``."""
    name = intrin_name(shape) + ("_ba" if swapped else "")
    if name in _REGISTERED:
        return name
    m, n, k = shape

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (m, k), "float32", offset_factor=1, scope=LB)
        B = T.match_buffer(b, (k, n), "float32", offset_factor=1, scope=LB)
        C = T.match_buffer(c, (m, n), "float32", offset_factor=1, scope=LB)
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], *((B[0:k, 0:n], A[0:m, 0:k]) if swapped else (A[0:m, 0:k], B[0:k, 0:n])))
            T.writes(C[0:m, 0:n])
            for i, j, r in T.grid(m, n, k):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, r])
                    C[vi, vj] = C[vi, vj] + (B[vk, vj] * A[vi, vk] if swapped else A[vi, vk] * B[vk, vj])

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
    """Map every GEMM-shaped reduction whose tile divides the MME shape, and every stride-1
    convolution whose operands are staged in LB (:class:`ConvOperands`), to the matrix unit.

    Each attempt runs on a copy of the schedule (random variables stay valid in copies) first;
    only when it succeeds is it repeated on ``sch`` itself, so ``sch`` is modified in place (a
    MetaSchedule postprocessor must change the schedule it is given) and a traced schedule
    records only instructions that succeed.
    """
    shape = spec.matrix_shape
    if shape is None:
        return sch
    for name in block_names(sch.mod["main"]):
        rv = sch.get_sblock(name)
        roles = _gemm_roles(sch, rv)
        conv = conv_operands(sch.get(rv)) if roles is None else None
        if roles is None and conv is None:
            continue
        trial = sch.copy()
        if roles is not None and _tensorize_one(trial, trial.get_sblock(name), roles, shape):
            _tensorize_one(sch, sch.get_sblock(name), roles, shape)
        elif conv is not None and _tensorize_conv(trial, trial.get_sblock(name), conv, spec):
            _tensorize_conv(sch, sch.get_sblock(name), conv, spec)
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
        name = sch.get(rvs[0]).name_hint
        if _gemm_roles(sch, rvs[0]) is None:
            conv = conv_operands(sch.get(rvs[0]))
            return None if conv is None else _tensorize_partial_conv(sch, name, conv, spec)
        return _tensorize_partial(sch, name, gemm_vars(sch.get(rvs[0])), shape, False, spec)

    for name in [r.block.name_hint for r in realizes
                 if _gemm_roles_of(r) is not None or conv_operands(r.block) is not None]:
        staged.stage([name], attempt, local=True)
    return staged.func


def _gemm_roles(sch, rv):
    """Loop vars feeding (i, j, k) of ``C[.., i, j] += A[.., i, k] * B[.., k, j]`` (float32)."""
    return _gemm_roles_of(_realize(sch, rv))


def _gemm_roles_of(realize):
    """:func:`_gemm_roles` of one block realize."""
    block = realize.block
    found = gemm_vars(block)
    if found is None or any(load.source.scope() != LB for load in _operands(block)):
        return None
    return _feeding(realize, found)


def gemm_vars(block) -> dict[str, str] | None:
    """The block variables of the rows, columns and reduction (``i``, ``j``, ``k``) of a float32
    ``C[.., i, j] += A[.., i, k] * B[.., k, j]``, else None."""
    operands = _operands(block)
    if operands is None:
        return None
    a, b = operands
    ivars = {iv.var.name: iv for iv in block.iter_vars}
    c_idx = list(block.body.indices)
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
    return {"i": vi, "j": vj, "k": vk}


def _operands(block):
    """The loads ``A`` and ``B`` of a float32 update ``C = C + A * B``, else None."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or str(body.buffer.dtype) != "float32":
        return None
    value = body.value
    if not (isinstance(value, tirx.Add) and isinstance(value.b, tirx.Mul)
            and isinstance(value.a, tvm.ir.TensorLoad) and value.a.source.same_as(body.buffer)):
        return None
    a, b = value.b.a, value.b.b
    return (a, b) if isinstance(a, tvm.ir.TensorLoad) and isinstance(b, tvm.ir.TensorLoad) else None


@dataclass(frozen=True)
class ConvOperands:
    """An NCHW convolution update ``C[n, f, y, x] += X[n, c, y * S + r, x * S + s] * W[f, c, r, s]``
    as the matrix unit sees it: the block variables of its rows ``f``, columns ``x``, reduction
    ``c`` and kernel taps ``(r, s)``, the names of ``X`` and ``W``, the row width, whether the
    block multiplies ``X * W`` (``swapped``, as TOPI's ``conv2d_nchw`` does), and the stride ``S``
    along the rows (``stride``; the stride between rows needs no layout of its own)."""

    rows: str
    columns: str
    reduction: str
    taps: tuple[str, str]
    data: str
    weight: str
    width: int
    swapped: bool
    stride: int = 1


def conv_operands(block) -> ConvOperands | None:
    """The :class:`ConvOperands` of a float32 block, else None (dilated, grouped or differently
    laid out convolutions, anything else). A 1x1 kernel's taps may be the constant 0
    (``W[f, c, 0, 0]``, ``X[n, c, y * S, x * S]``: TVM drops unit loops) and are then named
    ``""``."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or str(body.buffer.dtype) != "float32" \
            or len(body.indices) != 4:
        return None
    value = body.value
    if not (isinstance(value, tirx.Add) and isinstance(value.b, tirx.Mul)
            and isinstance(value.a, tvm.ir.TensorLoad) and value.a.source.same_as(body.buffer)):
        return None
    batch = body.indices[0]  # the constant 0 for one image (TVM drops unit loops)
    out = _var_names(body.indices[1:])
    kinds = {iv.var.name: int(iv.iter_type) for iv in block.iter_vars}
    extents = {iv.var.name: iv.dom.extent for iv in block.iter_vars}
    if out is None or any(kinds.get(v) != 0 for v in out) or not (
            _is_zero(batch) or kinds.get(getattr(batch, "name", None)) == 0):
        return None
    out = [batch, *out]
    first, second = value.b.a, value.b.b
    if not (isinstance(first, tvm.ir.TensorLoad) and isinstance(second, tvm.ir.TensorLoad)):
        return None
    for data, weight, swapped in ((first, second, True), (second, first, False)):
        if len(weight.indices) != 4 or len(data.indices) != 4:
            continue
        c = _var_names(weight.indices[1:2])
        found = [_tap(weight.indices[2], data.indices[2], out[2]),
                 _tap(weight.indices[3], data.indices[3], out[3])]
        if _var_names(weight.indices[:1]) != [out[1]] or c is None or None in found \
                or _var_names(data.indices[1:2]) != c or not _same_index(data.indices[0], batch):
            continue
        taps = [tap for tap, _ in found]
        others = [v for v, kind in kinds.items() if kind == 2 and v != c[0] and v not in taps]
        if kinds.get(c[0]) != 2 or any(not _is_one(extents[v]) for v in others):
            return None
        return ConvOperands(out[1], out[3], c[0], tuple(taps), data.source.name,
                            weight.source.name, int(body.buffer.shape[3]), swapped, found[1][1])
    return None


def conv_roles(conv: ConvOperands) -> dict[str, str]:
    """The block variables of a convolution's matrix-unit rows, columns and reduction."""
    return {"i": conv.rows, "j": conv.columns, "k": conv.reduction}


def _tap(weight_index, data_index, out: str) -> tuple[str, int] | None:
    """The tap variable of one window dimension and its stride ``S`` (``W[.., r]`` and
    ``X[.., y * S + r]``), ``""`` for a unit window (``W[.., 0]`` and ``X[.., y * S]``), else None."""
    if isinstance(weight_index, tvm.ir.Var):
        if not isinstance(data_index, tirx.Add):
            return None
        for outer, tap in ((data_index.a, data_index.b), (data_index.b, data_index.a)):
            stride = _stride_of(outer, out)
            if stride is not None and _var_names([tap]) == [weight_index.name]:
                return weight_index.name, stride
        return None
    unit = isinstance(weight_index, tirx.IntImm) and weight_index.value == 0
    stride = _stride_of(data_index, out) if unit else None
    return None if stride is None else ("", stride)


def _stride_of(index, out: str) -> int | None:
    """``S`` when ``index`` is the variable ``out`` (1) or ``out * S``, else None."""
    if _var_names([index]) == [out]:
        return 1
    if isinstance(index, tirx.Mul):
        for var, factor in ((index.a, index.b), (index.b, index.a)):
            if _var_names([var]) == [out] and isinstance(factor, tirx.IntImm) and factor.value > 0:
                return int(factor.value)
    return None


def _is_one(extent) -> bool:
    return isinstance(extent, tirx.IntImm) and extent.value == 1


def _is_zero(index) -> bool:
    return isinstance(index, tirx.IntImm) and index.value == 0


def _same_index(a, b) -> bool:
    """Whether two indices are the same variable or both the constant 0."""
    if _is_zero(a) or _is_zero(b):
        return _is_zero(a) and _is_zero(b)
    return _var_names([a, b]) is not None and a.name == b.name


def conv_columns(width: int, spec: DSASpec) -> int | None:
    """Columns of one matrix-unit instruction over rows ``width`` wide: the largest divisor of
    ``width`` the unit holds, when the unit over that many columns outruns the vector MAC unit
    (a call over ``n`` of its ``N`` columns does ``n / N`` of its work); else None."""
    shape = spec.matrix_shape
    if shape is None:
        return None
    columns = max(d for d in range(1, min(width, shape[1]) + 1) if width % d == 0)
    matrix, vmac = spec.unit_for("matrix"), spec.unit_for("vmac")
    return columns if matrix.ops_per_cycle * columns > vmac.ops_per_cycle * shape[1] else None


def _var_names(indices) -> list[str] | None:
    return [i.name for i in indices] if all(isinstance(i, tvm.ir.Var) for i in indices) else None


def _conv_loops(sch, rv, conv: ConvOperands, spec: DSASpec, partial: bool = False) \
        -> tuple[dict, tuple] | None:
    """The innermost loops feeding the rows, columns and reduction of convolution ``rv`` (as
    :func:`_role_loops`, ``partial`` included) and the instruction shape; None when an operand is
    outside LB or an extent does not divide."""
    block = sch.get(rv)
    if any(region.source.scope() != LB for region in (*block.reads, *block.writes)):
        return None
    columns = conv_columns(conv.width, spec)
    if columns is None:
        return None
    shape = (spec.matrix_shape[0], columns, spec.matrix_shape[2])
    roles = _feeding(_realize(sch, rv), conv_roles(conv))
    inner = _role_loops(sch, rv, roles, shape, partial)
    return None if inner is None else (inner, shape)


def _tensorize_conv(sch, rv, conv: ConvOperands, spec: DSASpec) -> bool:
    """Lay out the LB operands of convolution ``rv`` as row-major GEMM operands (module
    docstring), then split and tensorize it as :func:`_tensorize_loops`; on ``False`` the
    schedule may hold the steps made before the failure."""
    found = _conv_loops(sch, rv, conv, spec)
    if found is None or not _conv_layout(sch, rv, conv):
        return False
    inner, shape = found
    return _tensorize_loops(sch, rv, inner, shape, conv.swapped)


def _conv_layout(sch, rv, conv: ConvOperands) -> bool:
    """Lay out the LB operands of convolution ``rv`` as row-major GEMM operands (module
    docstring): ``X`` as ``[n, y, c, x]`` (in ``S`` phases per row for stride ``S``), ``W`` as
    ``[r, s, f, c]`` and ``C`` as ``[n, y, f, x]``."""
    reads = [region.source.name for region in sch.get(rv).reads]
    stride = conv.stride
    try:
        sch.transform_layout(rv, ("read", reads.index(conv.data)),
                             (lambda n, c, y, x: (n, y, c, x)) if stride == 1 else
                             (lambda n, c, y, x: (n, y, x % stride, c, x // stride)),
                             pad_value=None if stride == 1 else 0.0)
        sch.transform_layout(rv, ("read", reads.index(conv.weight)), lambda f, c, r, s: (r, s, f, c))
        sch.transform_layout(rv, ("write", 0), lambda n, f, y, x: (n, y, f, x))
        return True
    except (s_tir.ScheduleError, ValueError, RuntimeError) as err:
        _LOG.debug("matrix unit declined the convolution's layout: %s", err)
        return False


def _tensorize_partial_conv(sch, name: str, conv: ConvOperands, spec: DSASpec):
    """:func:`_tensorize_partial` of convolution ``name`` after :func:`_conv_layout`."""
    rv = sch.get_sblock(name)
    found = _conv_loops(sch, rv, conv, spec, partial=True)
    if found is None or not _conv_layout(sch, rv, conv):
        return None
    return _tensorize_partial(sch, name, conv_roles(conv), found[1], conv.swapped, spec)


def _tensorize_partial(sch, name: str, roles: dict[str, str], shape, swapped: bool, spec: DSASpec):
    """The schedule with block ``name`` on the matrix unit, tiles the instruction ``shape`` does
    not divide included (:mod:`.partial_tiles`), or None where the unit would be slower than the
    vector MAC unit or a step fails. ``roles``: the block variable of each role (``i``, ``j``,
    ``k``).

    The accumulator is initialised per tile first, and the three role loops moved below the
    block's other loops and made a block of their own (``blockize``): a role's index
    inside it then starts at zero, where its offset outside (an instance of 197 rows) need not be
    a multiple of the instruction. :func:`.partial_tiles.split_partial_tiles` then gives each
    piece its own nest."""
    rv = sch.get_sblock(name)
    variables = [iv.var.name for iv in sch.get(rv).iter_vars]
    if roles is None or any(var not in variables for var in roles.values()):
        return None
    inner = _loops_feeding(sch, rv, roles, shape)
    if inner is None:
        return None
    extents = [int(sch.get(inner[role]).extent) for role in "ijk"]
    if not outruns_vector_mac(extents, shape, spec):
        return None
    loops = sch.get_loops(rv)
    first = min(_loop_index(sch, loops, inner[role]) for role in "ijk")
    # The accumulator is initialised above the first reduction loop below the tile loop (a
    # chunk loop) or above the role loops, inside the loops that tile its rows and columns, so
    # that it is allocated per tile.
    reduction = loop_iter_types(sch, rv)
    chunk = next((p for p in range(_below_tile(sch, loops), first)
                  if reduction.get(sch.get(loops[p]).loop_var.name) == 2), first)
    try:
        sch.decompose_reduction(rv, loops[chunk])
        # the other loops below the first role loop (a convolution's taps, unit loops) go above
        below = sch.get_loops(rv)[first:]
        own = [lp for lp in below if any(_same_loop(sch, lp, inner[role]) for role in "ijk")]
        if len(own) < len(below):
            sch.reorder(*[lp for lp in below if not any(_same_loop(sch, lp, o) for o in own)], *own)
        outer = sch.get(sch.blockize(own[0])).name_hint
        # blockize names the inner block's variables ``<var>_i``
        variables = [iv.var.name for iv in sch.get(rv).iter_vars]
        roles = {role: f"{var}_i" if f"{var}_i" in variables else var for role, var in roles.items()}
        func, pieces = split_partial_tiles(sch.mod["main"], outer, roles, shape)
        sch = new_schedule(func)
        for block in pieces:
            rv = sch.get_sblock(block)
            inner = _loops_feeding(sch, rv, roles, shape)
            part = instruction_shape([int(sch.get(inner[role]).extent) for role in "ijk"], shape)
            if not _tensorize_loops(sch, rv, inner, part, swapped, decompose=False):
                return None
    except (s_tir.ScheduleError, ValueError, TypeError, RuntimeError) as err:
        _LOG.debug("matrix unit declined the partial tiles of %s: %s", name, err)
        return None
    return sch


def _loops_feeding(sch, rv, roles: dict[str, str], shape) -> dict | None:
    """:func:`_role_loops` (``partial``) of the block variables ``roles`` (role -> name)."""
    return _role_loops(sch, rv, _feeding(_realize(sch, rv), roles), shape, partial=True)


def _feeding(realize, roles: dict[str, str]) -> dict[str, list[str]]:
    """The loop variables each role's block variable (``roles``: role -> name) is bound to."""
    binding = {iv.var.name: value for iv, value in zip(realize.block.iter_vars, realize.iter_values)}
    return {role: [v.name for v in vars_in(binding[var])] for role, var in roles.items()}


def _loop_index(sch, loops, loop) -> int:
    return next(p for p, lp in enumerate(loops) if _same_loop(sch, lp, loop))


def _same_loop(sch, a, b) -> bool:
    return sch.get_sref(a).same_as(sch.get_sref(b))


def _decompose_below_tile(sch, rv) -> None:
    """Initialise an accumulator once per tile: below the tile loop (the first loop, or the one
    annotated as such below an instance loop), above any reduction chunk loop."""
    loops = sch.get_loops(rv)
    sch.decompose_reduction(rv, loops[_below_tile(sch, loops)])


def _below_tile(sch, loops) -> int:
    """The position of the first loop below the tile loop (:func:`_decompose_below_tile`)."""
    tiles = [p for p, lp in enumerate(loops) if TILE in (sch.get(lp).annotations or {})]
    return (tiles[-1] if tiles else 0) + 1


def _tensorize_one(sch, rv, roles, shape) -> bool:
    """Split the innermost loop of each role by the MME shape and tensorize."""
    inner = _role_loops(sch, rv, roles, shape)
    return inner is not None and _tensorize_loops(sch, rv, inner, shape)


def _role_loops(sch, rv, roles, shape, partial: bool = False) -> dict | None:
    """The innermost loop of each role (``i``, ``j``, ``k``), when each extent is a constant
    multiple of the MME shape (with ``partial`` any constant, :mod:`.partial_tiles`); ``None``
    otherwise. Changes nothing."""
    loops = sch.get_loops(rv)
    by_var = {sch.get(lp).loop_var.name: lp for lp in loops}
    inner = {}
    for role, size in zip("ijk", shape):
        candidates = [by_var[v] for v in roles[role] if v in by_var]
        if not candidates:
            return None
        loop = candidates[-1]
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm) or (extent.value % size and not partial):
            return None  # symbolic: no fixed split
        inner[role] = loop
    return inner


def _tensorize_loops(sch, rv, inner, shape, swapped: bool = False, decompose: bool = True) -> bool:
    """Split ``inner`` (:func:`_role_loops`) by the instruction ``shape``, move the three
    instruction loops below every other loop (a convolution's kernel taps, unit loops),
    initialise the accumulator below the tile loop (unless ``decompose`` is False: done already)
    and tensorize; on ``False`` the schedule may hold the splits made before the failure."""
    try:
        parts = {}
        for role, size in zip("ijk", shape):
            extent = int(sch.get(inner[role]).extent)
            parts[role] = sch.split(inner[role], [extent // size, size])
        instruction = [parts[role][1] for role in "ijk"]
        loops = sch.get_loops(rv)
        first = min(_loop_index(sch, loops, parts[role][0]) for role in "ijk")
        rest = [lp for lp in loops[first:] if not any(_same_loop(sch, lp, i) for i in instruction)]
        sch.reorder(*rest, *instruction)
        if decompose:
            _decompose_below_tile(sch, rv)
        sch.tensorize(parts["i"][1], register_matrix_intrin(shape, swapped))
        return True
    except (s_tir.ScheduleError, ValueError, RuntimeError) as err:
        _LOG.debug("matrix unit declined: %s", err)
        return False


def _realize(sch, rv):
    name = sch.get(rv).name_hint
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(s_tir.SBlockRealize, found.append)])
    return next(r for r in found if r.block.name_hint == name)

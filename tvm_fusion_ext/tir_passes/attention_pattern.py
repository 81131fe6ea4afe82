"""Recognise a PrimFunc that computes batched scaled-dot-product attention, strictly.

``softmax(f(Q·Kᵀ)) · V`` as TVM's legalisation writes it and ``FuseTIR`` fuses it (the blocks of
``topi.nn.matmul``, ``topi.nn.softmax`` in ``include/tvm/topi/nn/softmax.h``, a second matmul, and
copies for reshapes / transposes / broadcasts in between). After every spatial block that writes
no parameter is inlined (``compute_inline``), exactly these blocks must remain, each in its own
full loop nest::

    score  S[b, i, j] = sum_c Q(b, i, c) * K(b, j, c)
    max    M[b, i]    = max_j f(S[b, i, j])                      f: +,-,*,/ with float constants
    sum    Z[b, i]    = sum_j exp(f(S[b, i, j]) - M[b, i])
    value  O[b, i, d] = sum_j exp(f(S[b, i, j]) - M[b, i]) / Z[b, i] * V(b, j, d)
    (out   Out[p]     = O[g(p)], g a bijection: the output's reshape / transpose, optional)

``b`` stands for any number of batch axes; ``Q``, ``K``, ``V`` are parameter loads whose indices
may be any expressions of the named axes (transposed or reshaped layouts), and the reduction
domains must be the whole axes. The match keeps those index expressions and ``f`` as they are,
so a kernel built from an :class:`AttentionPattern` computes what the function computes. Anything
else (a mask, softmax over another axis, a missing max subtraction, a partial reduction,
non-float32 data) is declined with ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.script import tirx as T

from .analysis import SPATIAL, analyze_blocks

_EXP = tvm.ir.Op.get("tirx.exp")

FLOAT32_LOWEST = -3.4028234663852886e38


@dataclass(frozen=True)
class AttentionPattern:
    """The parts of an attention PrimFunc, as expressions of canonical axis variables.

    ``batch`` are the batch axes (variable, extent); ``query``, ``key``, ``contract`` (Q·Kᵀ's
    reduction) and ``head`` (V's output dimension) one axis each. ``query_load`` /
    ``key_load`` / ``value_load`` are the parameter loads, ``score`` is ``f(S)`` (its one load
    is of ``S``), and ``output`` / ``output_indices`` where ``O[b, i, d]`` is stored.
    """

    func: tirx.PrimFunc
    batch: tuple
    query: tuple
    key: tuple
    contract: tuple
    head: tuple
    query_load: tvm.ir.PrimExpr
    key_load: tvm.ir.PrimExpr
    value_load: tvm.ir.PrimExpr
    score: tvm.ir.PrimExpr
    output: object
    output_indices: tuple

    def bind(self, expr, values: dict):
        """``expr`` (a load, or indices) with canonical axes replaced by ``values`` (cast to the
        axes' dtype)."""
        mapping = {var: value if str(value.ty) == str(var.ty) else tirx.Cast(str(var.ty), value)
                   for var, value in values.items()}
        if isinstance(expr, (list, tuple)):
            return [substitute_index(e, mapping) for e in expr]
        return _canonical(expr, mapping)

    def scaled(self, dot_product):
        """``f`` applied to one entry of ``Q·Kᵀ``."""
        return _map_loads(self.score, lambda _: dot_product)

    def axes(self, batch_index, query=None, key=None, contract=None, head=None) -> dict:
        """Canonical axis -> value: the batch axes from one fused ``batch_index`` (row-major over
        their extents), and the named axes that are given."""
        values, stride = {}, math.prod(extent for _, extent in self.batch)
        for var, extent in self.batch:
            stride //= extent
            values[var] = batch_index // stride % extent
        for (var, _), value in ((self.query, query), (self.key, key), (self.contract, contract),
                                (self.head, head)):
            if value is not None:
                values[var] = value
        return values

    def query_at(self, batch_index, row, c):
        """``Q`` at query ``row``, contraction index ``c``."""
        return self.bind(self.query_load, self.axes(batch_index, query=row, contract=c))

    def key_at(self, batch_index, key, c):
        """``K`` at ``key``, contraction index ``c``."""
        return self.bind(self.key_load, self.axes(batch_index, key=key, contract=c))

    def value_at(self, batch_index, key, d):
        """``V`` at ``key``, head index ``d``."""
        return self.bind(self.value_load, self.axes(batch_index, key=key, head=d))

    def store_output(self, batch_index, row, d, value):
        """The TVMScript store of ``value`` where ``O[b, row, d]`` lands in the output."""
        indices = self.bind(list(self.output_indices), self.axes(batch_index, query=row, head=d))
        return T.buffer_store(self.output, value, indices)


def match_attention(func: tirx.PrimFunc) -> AttentionPattern | None:
    """The :class:`AttentionPattern` of ``func``, or ``None`` if it is not exactly attention. A
    function without an ``exp`` call (every kernel but a softmax's) is refused after one walk of
    its body, before a schedule of it is made: every CPU kernel is offered to the attention rule
    first."""
    if not isinstance(func, tirx.PrimFunc) or not all(
            isinstance(p.ty, tirx.BufferType) and p.ty.dtype == "float32" for p in func.params):
        return None
    calls = []
    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, lambda call: calls.append(call.op))], order="pre")
    if not any(op.same_as(_EXP) for op in calls):
        return None
    try:
        sch = s_tir.Schedule(func)
        if analyze_blocks(sch) is None:
            return None
        for rv in sch.get_child_blocks(sch.get_sblock("root")):
            block = sch.get(rv)
            if all(iv.iter_type == SPATIAL for iv in block.iter_vars) \
                    and not _is_param(block.writes[0].source, func.params):
                sch.compute_inline(rv)
        infos = analyze_blocks(sch)
        if infos is None or len(infos) not in (4, 5):
            return None
        return _Matcher(func).match(*(_Block(info.block) for _, info in infos))
    except (RuntimeError, _NotAttention):  # ScheduleError, IndexMap.inverse's InternalError
        return None


class _NotAttention(Exception):
    """Raised inside the matcher where the function departs from the pattern."""


def _require(condition) -> None:
    if not condition:
        raise _NotAttention


def _is_param(buffer, params) -> bool:
    return any(buffer.same_as(p) for p in params)


class _Block:
    """A block with its unit axes replaced by their value and its indices simplified over its
    domain; ``spatial`` / ``reduce`` are its other variables."""

    def __init__(self, block: s_tir.SBlock):
        analyzer = sym.Analyzer()
        self.spatial, self.reduce, self.extents = [], [], {}
        for iv in block.iter_vars:
            if int(iv.dom.extent) == 1:
                analyzer.bind(iv.var, iv.dom.min)
                continue
            _require(int(iv.dom.min) == 0)
            analyzer.bind(iv.var, iv.dom)
            (self.spatial if iv.iter_type == SPATIAL else self.reduce).append(iv.var)
            self.extents[iv.var] = int(iv.dom.extent)
        store = block.body
        _require(isinstance(store, tirx.BufferStore))
        self.buffer = store.buffer
        self.write = [analyzer.simplify(e) for e in store.indices]  # unit axes bound to their value
        self.value = _map_loads(store.value, lambda load: tirx.BufferLoad(
            load.source, [analyzer.simplify(e) for e in load.indices]))
        self.init = None
        if block.init is not None:
            _require(isinstance(block.init, tirx.BufferStore) and isinstance(block.init.value, tirx.FloatImm))
            self.init = block.init.value.value

    def covers(self, write, names) -> bool:
        """Every index of ``write`` is a distinct one of ``names`` or 0 on a unit dimension, and
        every spatial variable is among them."""
        used = []
        for index, size in zip(write, self.buffer.ty.shape):
            if isinstance(index, tirx.Var) and index in names:
                used.append(index)
            elif not (isinstance(index, tirx.IntImm) and int(index) == 0 and int(size) == 1):
                return False
        return len(used) == len(set(used)) and set(used) == set(self.spatial)


class _Matcher:
    """Checks the four (five) blocks against the expressions the module docstring lists; each
    step raises :class:`_NotAttention` where the function departs from them."""

    def __init__(self, func):
        self.func, self.params = func, list(func.params)
        self.extent = {}  # canonical axis -> extent

    def match(self, score, maximum, total, value, out=None):
        s_buf, s_write, loads, batch, free, contract = self._score(score)
        # max: M = max(M, f(S)) over one of the two free axes of S (the key axis)
        m_buf, m_self, f_expr = self._reduction(maximum, is_max=True)
        s_loads = _loads(f_expr)
        _require(len(s_loads) == 1 and s_loads[0].source.same_as(s_buf) and _arithmetic(f_expr))
        mapping = self._unify(maximum, s_loads[0], s_write)
        key = mapping[maximum.reduce[0]]
        _require(key in free)
        query = free[0] if free[1].same_as(key) else free[1]
        q_load, k_load = loads if not _uses(loads[0], key) else loads[::-1]
        rows = [*batch, query]
        m_load = tirx.BufferLoad(m_buf, self._written(maximum, mapping, rows))
        _require_same(m_self, mapping, m_load)
        f_canon = _canonical(f_expr, mapping)
        numerator = tirx.exp(f_canon - m_load)
        # sum: Z = Z + exp(f(S) - M) over the key axis
        z_buf, z_self, z_term = self._reduction(total)
        mapping = self._unify(total, _first_load(z_term, s_buf), s_write)
        _require(mapping[total.reduce[0]].same_as(key))
        z_load = tirx.BufferLoad(z_buf, self._written(total, mapping, rows))
        _require_same(z_self, mapping, z_load)
        _require_same(z_term, mapping, numerator)
        # value: O = O + exp(f(S) - M) / Z * V over the key axis; the axis left over is the head
        o_buf, o_self, o_term = self._reduction(value)
        _require(isinstance(o_term, tirx.Mul) and isinstance(o_term.b, tvm.ir.TensorLoad))
        mapping = self._unify(value, _first_load(o_term.a, s_buf), s_write)
        _require(mapping[value.reduce[0]].same_as(key))
        left = [var for var in value.spatial if var not in mapping]
        _require(len(left) == 1)
        head = tirx.Var("d", left[0].ty)
        mapping[left[0]] = head
        self.extent[head] = value.extents[left[0]]
        o_write = self._written(value, mapping, [*rows, head])
        _require_same(o_self, mapping, tirx.BufferLoad(o_buf, o_write))
        _require_same(o_term.a, mapping, numerator / z_load)
        v_load = _canonical(o_term.b, mapping)
        _require(_is_param(v_load.source, self.params) and not _uses(v_load, query))
        internal = [s_buf, m_buf, z_buf]
        if out is None:
            output, output_indices = o_buf, o_write
        else:
            output, output_indices = self._epilogue(out, o_buf, o_write)
            internal.append(o_buf)
        inputs = [load.source for load in (q_load, k_load, v_load)]
        _require(not any(_is_param(b, self.params) for b in internal)
                 and _is_param(output, self.params) and not _is_param(output, inputs)
                 and all(_is_param(p, [output, *inputs]) for p in self.params))
        return AttentionPattern(
            func=self.func, batch=tuple((v, self.extent[v]) for v in batch),
            query=(query, self.extent[query]), key=(key, self.extent[key]),
            contract=(contract, self.extent[contract]), head=(head, self.extent[head]),
            query_load=q_load, key_load=k_load, value_load=v_load, score=f_canon, output=output, output_indices=tuple(output_indices))

    def _score(self, score: _Block):
        """S = S + A * B, A and B parameter loads, both walking the one reduction axis; axes that
        both use are batch axes, the two others the free axes (query and key, in some order)."""
        s_buf, s_self, term = self._reduction(score)
        _require(isinstance(term, tirx.Mul) and all(isinstance(x, tvm.ir.TensorLoad) and _is_param(
            x.source, self.params) for x in (term.a, term.b)))
        names, batch, free = {}, [], []
        for var in score.spatial:
            in_a, in_b = _uses(term.a, var), _uses(term.b, var)
            _require(in_a or in_b)
            names[var] = tirx.Var(f"b{len(batch)}" if in_a and in_b else f"x{len(free)}", var.ty)
            (batch if in_a and in_b else free).append(names[var])
        contract = score.reduce[0]
        names[contract] = tirx.Var("c", contract.ty)
        a_free = [var for var in score.spatial if names[var] in free and _uses(term.a, var)]
        _require(len(a_free) == 1 and _uses(term.a, contract) and _uses(term.b, contract)
                 and score.covers(score.write, names))
        s_write = [substitute_index(e, names) for e in score.write]
        _require_same(s_self, names, tirx.BufferLoad(s_buf, s_write))
        self.extent = {names[var]: extent for var, extent in score.extents.items()}
        loads = (_canonical(term.a, names), _canonical(term.b, names))
        return s_buf, s_write, loads, batch, free, names[contract]

    def _reduction(self, block: _Block, is_max: bool = False):
        """(buffer, self-load, term) of ``X = X + term`` from 0 / ``X = max(X, term)`` from the
        lowest float32, reducing over exactly one axis."""
        value = block.value
        if is_max:
            _require(isinstance(value, tirx.Max) and block.init is not None and block.init <= FLOAT32_LOWEST)
        else:
            _require(isinstance(value, tirx.Add) and block.init == 0.0)
        _require(len(block.reduce) == 1 and isinstance(value.a, tvm.ir.TensorLoad)
                 and value.a.source.same_as(block.buffer))
        return block.buffer, value.a, value.b

    def _unify(self, block: _Block, load, canonical_write) -> dict:
        """Block variable -> canonical axis, from a load of S at the axes S was written at; every
        variable of the block must be matched to an axis of the same extent."""
        mapping = {}
        for index, canon in zip(load.indices, canonical_write):
            if isinstance(canon, tirx.Var):
                _require(isinstance(index, tirx.Var) and index in block.extents
                         and mapping.get(index, canon).same_as(canon))
                mapping[index] = canon
            else:
                _require(isinstance(index, tirx.IntImm) and int(index) == int(canon))
        _require(len(set(mapping.values())) == len(mapping) and block.reduce[0] in mapping)
        _require(all(block.extents[var] == self.extent[canon] for var, canon in mapping.items()))
        return mapping

    def _written(self, block: _Block, mapping, axes) -> list:
        """The canonical write indices of ``block``, which must write exactly ``axes``, whole."""
        spatial = [mapping.get(var) for var in block.spatial]
        _require(None not in spatial and set(spatial) == set(axes) and len(spatial) == len(axes)
                 and block.covers(block.write, mapping))
        return [substitute_index(e, mapping) for e in block.write]

    def _epilogue(self, out: _Block, o_buf, o_write):
        """(output buffer, where O[b, i, d] lands) for ``Out[p] = O[g(p)]``, g a bijection."""
        load = out.value
        _require(not out.reduce and out.init is None and _is_param(out.buffer, self.params)
                 and isinstance(load, tvm.ir.TensorLoad) and load.source.same_as(o_buf)
                 and out.covers(out.write, out.extents))
        shape = [int(x) for x in out.buffer.ty.shape]
        index_vars = [index if isinstance(index, tirx.Var) else tirx.Var("unit", index.ty)
                      for index in out.write]
        _require(all(out.extents.get(var, 1) == size for var, size in zip(index_vars, shape)))
        gather = tirx.IndexMap(index_vars, list(load.indices), None)
        _require([int(x) for x in gather.map_shape(shape)] == [int(x) for x in o_buf.ty.shape])
        scatter = gather.inverse(shape)  # raises (declined) where g is not a bijection
        analyzer = sym.Analyzer()
        for var, extent in self.extent.items():
            analyzer.bind(var, tvm.ir.Range(0, extent))
        return out.buffer, [analyzer.simplify(e) for e in scatter.map_indices(o_write)]


def substitute_index(index, mapping: dict):
    """Index expression ``index`` with the variables in ``mapping`` replaced, simplified."""
    analyzer = sym.Analyzer()
    for var, value in mapping.items():
        analyzer.bind(var, value)
    return analyzer.simplify(index)


def _require_same(expr, mapping: dict, expected) -> None:
    """``expr`` over the canonical axes is ``expected``, structurally."""
    _require(tvm_ffi.structural_equal(_canonical(expr, mapping), expected))


def _canonical(expr, mapping: dict):
    """``expr`` with the variables in ``mapping`` replaced in every load's indices."""
    return _map_loads(expr, lambda load: tirx.BufferLoad(
        load.source, [substitute_index(e, mapping) for e in load.indices]))


def _first_load(expr, buffer):
    loads = [load for load in _loads(expr) if load.source.same_as(buffer)]
    _require(bool(loads))
    return loads[0]


def _uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.Var, lambda v: found.append(v.same_as(var)))], order="pre")
    return any(found)


def _loads(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, found.append)], order="pre")
    return found


_ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div)


def _arithmetic(expr) -> bool:
    """``expr`` is loads combined with float constants by +, -, *, / (a score scale)."""
    if isinstance(expr, (tirx.FloatImm, tvm.ir.TensorLoad)):
        return True
    return isinstance(expr, _ARITHMETIC) and _arithmetic(expr.a) and _arithmetic(expr.b)


def _map_loads(expr, fn):
    """``expr`` (loads, float constants, + - * / max exp) rebuilt with ``fn`` applied to each
    load; any other expression is not attention."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return fn(expr)
    if isinstance(expr, (tirx.FloatImm, tvm.ir.Var)):
        return expr
    if isinstance(expr, (*_ARITHMETIC, tirx.Max)):
        return type(expr)(_map_loads(expr.a, fn), _map_loads(expr.b, fn))
    _require(isinstance(expr, tvm.ir.Call) and expr.op.same_as(tvm.ir.Op.get("tirx.exp")))
    return tirx.exp(_map_loads(expr.args[0], fn))

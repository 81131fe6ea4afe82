"""Random well-formed Relax modules for fuzzing every fusion strategy.

One generator, two drivers:

* :func:`modules` - a hypothesis strategy (hypothesis shrinks failing cases towards fewer, simpler
  ops: every choice shrinks towards 0, which means "the simplest op", "the latest value" (a chain),
  "no keepdims", "smallest dimension");
* :func:`random_module` - the same generator driven by a seeded NumPy generator, for
  ``scripts/fuzz.py``; :class:`RecordedChoices` keeps the choice sequence so that
  :func:`shrink_choices` can minimise a failing case without hypothesis.

A module is ``main`` with one dataflow block over ``float32`` tensors of small static shapes,
built with ``relax.BlockBuilder`` and ``relax.op.*`` from the vocabulary of :data:`OPS`:
element-wise unary and broadcasting binary ops, reductions along random axes (keepdims both ways),
softmax, layer norm, matmul, NCHW conv2d, reshape, permute_dims, strided_slice, concat, split
(tuple + tuple-get-items), take (indices from ``arange``, so always in range; ``clip`` mode) and a fan-out op that
applies several ops to one value and may join them again (diamonds). Operands are picked counting
back from the latest value, so choices near 0 give long chains and larger ones fan-outs and
diamonds; every value nobody consumes is an output (a tuple when there are several), plus random
intermediates, so there is no dead code. Only scalar constants appear, so every module prints as
plain TVMScript (no metadata section) and can be saved as a regression file.

Magnitudes are tracked per value (a bound on ``|x|`` for inputs in [-1, 1]); an operand whose bound
exceeds :data:`MAX_SCALE` is first multiplied by a power-of-two reciprocal, and ``exp`` is only
applied to small operands, so float32 results stay comparable under ``verify.TOLERANCES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

DTYPE = "float32"
MAX_SCALE = 8.0  # larger operands are rescaled first
MAX_ELEMENTS = 2048  # no tensor is larger than this


@dataclass(frozen=True)
class GraphConfig:
    """Size limits of a generated module."""

    max_ops: int = 10  # generator steps (a fan-out or a split emits several bindings)
    max_inputs: int = 3  # initial parameters (ops may add weights / extra inputs)
    max_rank: int = 4
    max_dim: int = 6


class Choices:
    """Where the generator's decisions come from: ``integer(lo, hi)`` (inclusive) is the only
    primitive; everything else is derived from it so that every driver shrinks the same way."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def pick(self, items: Sequence):
        return items[self.integer(0, len(items) - 1)]

    def flag(self) -> bool:
        return self.integer(0, 1) == 1


class RecordedChoices(Choices):
    """Choices from a seeded NumPy generator, or replayed from ``values`` (then clamped into range;
    an exhausted replay answers ``lo``). ``self.values`` records the choices actually made."""

    def __init__(self, seed: int = 0, values: Sequence[int] | None = None):
        self.rng = np.random.default_rng(seed)
        self.replay = list(values) if values is not None else None
        self.values: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        if self.replay is None:
            value = int(self.rng.integers(lo, hi + 1))
        else:
            i = len(self.values)
            value = min(max(self.replay[i], lo), hi) if i < len(self.replay) else lo
        self.values.append(value)
        return value


class _DrawChoices(Choices):
    """Choices drawn by hypothesis (inside a ``@st.composite`` strategy)."""

    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw = draw
        self.st = st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))


@dataclass
class _Value:
    expr: relax.Expr
    shape: tuple[int, ...]
    scale: float  # bound on |value|
    uses: int = 0


@dataclass
class _Builder:
    """State of one module under construction (inside ``bb.dataflow()``)."""

    bb: relax.BlockBuilder
    ch: Choices
    config: GraphConfig
    params: list = field(default_factory=list)
    values: list[_Value] = field(default_factory=list)

    # ---- values and operands ------------------------------------------------------------
    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.ch.integer(1, self.config.max_rank) if rank is None else rank
        return tuple(self.ch.integer(1, self.config.max_dim) for _ in range(rank))

    def new_input(self, shape: Sequence[int]) -> _Value:
        var = relax.Var(f"x{len(self.params)}", relax.TensorType(tuple(shape), DTYPE))
        self.params.append(var)
        return _Value(var, tuple(shape), 1.0)

    def emit(self, expr: relax.Expr, scale: float, record: bool = True) -> _Value:
        var = self.bb.emit(expr)
        value = _Value(var, tuple(int(d) for d in var.ty.shape.values), scale)
        if record:
            self.values.append(value)
        return value

    def peek(self) -> _Value:
        """A value counted back from the latest (0 = latest: chains); not yet marked used."""
        return self.values[-1 - self.ch.integer(0, len(self.values) - 1)]

    def operand(self) -> _Value:
        return self.bounded(self.peek())

    def bounded(self, value: _Value) -> _Value:
        """Mark ``value`` used; rescaled by a power of two first when its bound is large."""
        value.uses += 1
        if value.scale <= MAX_SCALE:
            return value
        factor = 2.0 ** -math.ceil(math.log2(value.scale))
        return self.emit(relax.op.multiply(value.expr, relax.const(factor, DTYPE)),
                         value.scale * factor, record=False)

    def input_like(self, shape: Sequence[int]) -> _Value:
        """An existing value of exactly ``shape`` if the choice says so and one exists, else a new
        parameter."""
        same = [v for v in self.values if v.shape == tuple(shape)]
        if same and self.ch.flag():
            return self.bounded(self.ch.pick(same))
        return self.new_input(shape)


# ---- the op vocabulary ---------------------------------------------------------------------------
# Each op takes the builder and returns False when it does not apply (the generator then falls back
# to a unary op). The list order is the shrink order: simplest first.

_UNARY = [
    ("relu", relax.op.nn.relu, lambda s: s),
    ("negative", relax.op.negative, lambda s: s),
    ("sigmoid", relax.op.sigmoid, lambda s: 1.0),
    ("tanh", relax.op.tanh, lambda s: 1.0),
    ("abs", relax.op.abs, lambda s: s),
    ("exp", relax.op.exp, lambda s: math.exp(s)),
    ("square", relax.op.square, lambda s: s * s),
    ("gelu", relax.op.nn.gelu, lambda s: s),
    ("silu", relax.op.nn.silu, lambda s: s),
    ("cos", relax.op.cos, lambda s: 1.0),
]
_BINARY = [
    ("add", relax.op.add, lambda a, b: a + b),
    ("multiply", relax.op.multiply, lambda a, b: a * b),
    ("subtract", relax.op.subtract, lambda a, b: a + b),
    ("maximum", relax.op.maximum, max),
    ("minimum", relax.op.minimum, max),
]
_REDUCE = [("sum", relax.op.sum), ("mean", relax.op.mean), ("max", relax.op.max), ("min", relax.op.min)]


def _unary_of(g: _Builder, x: _Value) -> _Value:
    _, op, scale = g.ch.pick(_UNARY)
    if op is relax.op.exp and x.scale > 2.0:
        op, scale = relax.op.tanh, (lambda s: 1.0)
    return g.emit(op(x.expr), scale(x.scale))


def _unary(g: _Builder) -> bool:
    _unary_of(g, g.operand())
    return True


def _broadcast_partner(g: _Builder, shape: tuple[int, ...]) -> _Value:
    """A right operand that broadcasts with ``shape``: the same shape, a suffix of it, the shape
    with some dimensions set to 1, a scalar constant, or an existing value."""
    kind = g.ch.integer(0, 4)
    if kind == 0:
        return g.input_like(shape)
    if kind == 1:
        return _Value(relax.const(g.ch.pick([0.5, -1.5, 2.0, 0.25]), DTYPE), (), 2.0)
    if kind == 2 and shape:
        return g.input_like(shape[g.ch.integer(0, len(shape) - 1):])
    if kind == 3:
        return g.input_like(tuple(1 if g.ch.flag() else d for d in shape))
    other = g.peek()
    return g.bounded(other) if _broadcasts(shape, other.shape) else g.input_like(shape)


def _broadcasts(a: Sequence[int], b: Sequence[int]) -> bool:
    out = np.broadcast_shapes(tuple(a), tuple(b)) if _compatible(a, b) else None
    return out is not None and tuple(out) == tuple(a) and np.prod(out) <= MAX_ELEMENTS


def _compatible(a, b) -> bool:
    return all(x == y or 1 in (x, y) for x, y in zip(reversed(a), reversed(b)))


def _binary(g: _Builder) -> bool:
    x = g.operand()
    y = _broadcast_partner(g, x.shape)
    _, op, scale = g.ch.pick(_BINARY)
    lhs, rhs = (y, x) if g.ch.flag() and y.shape == x.shape else (x, y)
    g.emit(op(lhs.expr, rhs.expr), scale(lhs.scale, rhs.scale))
    return True


def _reduce(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    x = g.bounded(x)
    _, op = g.ch.pick(_REDUCE)
    axes = sorted({g.ch.integer(0, len(x.shape) - 1) for _ in range(g.ch.integer(1, len(x.shape)))})
    if g.ch.flag():  # negative axes too
        axes = [a - len(x.shape) for a in axes]
    reduced = math.prod(x.shape[a] for a in axes)
    g.emit(op(x.expr, axes, keepdims=g.ch.flag()), x.scale * (reduced if op is relax.op.sum else 1))
    return True


def _softmax(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    x = g.bounded(x)
    g.emit(relax.op.nn.softmax(x.expr, axis=g.ch.integer(-len(x.shape), len(x.shape) - 1)), 1.0)
    return True


def _layer_norm(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    x = g.bounded(x)
    k = g.ch.integer(1, len(x.shape))
    axes = list(range(len(x.shape) - k, len(x.shape)))
    gamma = g.new_input(x.shape[-k:])
    beta = g.new_input(x.shape[-k:])
    g.emit(relax.op.nn.layer_norm(x.expr, gamma.expr, beta.expr, axes),
           math.sqrt(math.prod(x.shape[-k:])) + 1.0)
    return True


def _matmul(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    k = x.shape[-1]
    n = g.ch.integer(1, g.config.max_dim)
    if math.prod(x.shape[:-1]) * n > MAX_ELEMENTS:
        return False
    x = g.bounded(x)
    w = g.input_like((k, n))
    lhs, rhs = x, w
    if len(x.shape) >= 2 and g.ch.flag():  # a weight on the left: [n, m] @ x with m = x.shape[-2]
        w = g.input_like((n, x.shape[-2]))
        lhs, rhs = w, x
    g.emit(relax.op.matmul(lhs.expr, rhs.expr), x.scale * w.scale * (k if lhs is x else x.shape[-2]))
    return True


def _conv2d(g: _Builder) -> bool:
    rank4 = [v for v in g.values if len(v.shape) == 4 and v.shape[1] <= 8]
    x = g.bounded(g.ch.pick(rank4)) if rank4 and g.ch.flag() else g.new_input(
        (g.ch.integer(1, 2), g.ch.integer(1, 4), g.ch.integer(3, 8), g.ch.integer(3, 8)))
    _, c, h, w = x.shape
    kernel = g.ch.pick([1, 3])
    padding = g.ch.integer(0, 1)
    stride = g.ch.integer(1, 2)
    if min(h, w) + 2 * padding < kernel:
        kernel = 1
    weight = g.new_input((g.ch.integer(1, 4), c, kernel, kernel))
    g.emit(relax.op.nn.conv2d(x.expr, weight.expr, strides=stride, padding=padding),
           x.scale * c * kernel * kernel)
    return True


def _reshape(g: _Builder) -> bool:
    x = g.operand()
    remaining, dims = math.prod(x.shape), []
    for _ in range(g.ch.integer(1, g.config.max_rank) - 1):
        divisors = [d for d in range(1, remaining + 1) if remaining % d == 0]
        dims.append(g.ch.pick(divisors))
        remaining //= dims[-1]
    dims.append(remaining)
    g.emit(relax.op.reshape(x.expr, dims), x.scale)
    return True


def _transpose(g: _Builder) -> bool:
    x = g.peek()
    if len(x.shape) < 2:
        return False
    x = g.bounded(x)
    axes = list(range(len(x.shape)))
    for i in range(len(axes) - 1, 0, -1):  # Fisher-Yates: all-zero choices reverse the axes
        j = g.ch.integer(0, i)
        axes[i], axes[j] = axes[j], axes[i]
    g.emit(relax.op.permute_dims(x.expr, axes), x.scale)
    return True


def _strided_slice(g: _Builder) -> bool:
    x = g.peek()
    axes = [a for a in range(len(x.shape)) if x.shape[a] > 1]
    if not axes:
        return False
    x = g.bounded(x)
    axes = sorted({g.ch.pick(axes) for _ in range(g.ch.integer(1, len(axes)))})
    begin = [g.ch.integer(0, x.shape[a] - 1) for a in axes]
    end = [g.ch.integer(b + 1, x.shape[a]) for a, b in zip(axes, begin)]
    strides = [g.ch.integer(1, 2) for _ in axes]
    g.emit(relax.op.strided_slice(x.expr, axes, begin, end, strides), x.scale)
    return True


def _concat(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    axis = g.ch.integer(0, len(x.shape) - 1)
    fits = [v for v in g.values if len(v.shape) == len(x.shape)
            and all(a == b for i, (a, b) in enumerate(zip(v.shape, x.shape)) if i != axis)]
    others = []  # existing values (fits) or new parameters (shapes)
    for _ in range(g.ch.integer(1, 2)):
        if g.ch.flag():
            others.append(g.ch.pick(fits))  # x itself always fits
        else:
            shape = list(x.shape)
            shape[axis] = g.ch.integer(1, g.config.max_dim)
            others.append(tuple(shape))
    sizes = [math.prod(o.shape if isinstance(o, _Value) else o) for o in others]
    if math.prod(x.shape) + sum(sizes) > MAX_ELEMENTS:
        return False
    parts = [g.bounded(x)] + [g.bounded(o) if isinstance(o, _Value) else g.new_input(o)
                              for o in others]
    g.emit(relax.op.concat([p.expr for p in parts], axis), max(p.scale for p in parts))
    return True


def _split(g: _Builder) -> bool:
    x = g.peek()
    axes = [a for a in range(len(x.shape)) if x.shape[a] > 1]
    if not axes:
        return False
    x = g.bounded(x)
    axis = g.ch.pick(axes)
    dim = x.shape[axis]
    sections = [n for n in range(2, min(dim, 4) + 1) if dim % n == 0]
    if sections and g.ch.flag():
        how = g.ch.pick(sections)
        count = how
    else:
        how = sorted({g.ch.integer(1, dim - 1) for _ in range(g.ch.integer(1, min(dim - 1, 3)))})
        count = len(how) + 1
    parts = g.bb.emit(relax.op.split(x.expr, how, axis))
    for i in range(count):
        g.emit(relax.TupleGetItem(parts, i), x.scale)
    return True


def _take(g: _Builder) -> bool:
    x = g.peek()
    if not x.shape:
        return False
    x = g.bounded(x)
    axis = g.ch.integer(0, len(x.shape) - 1)
    dim = x.shape[axis]
    start = g.ch.integer(0, dim - 1)
    step = g.ch.integer(1, 2)
    indices = g.bb.emit(relax.op.arange(start, dim, step, "int64"))
    g.emit(relax.op.take(x.expr, indices, axis=axis, mode="clip"), x.scale)
    return True


def _fan_out(g: _Builder) -> bool:
    """Several ops of one value (a wide fan-out), optionally joined again (a diamond)."""
    x = g.operand()
    branches = [_unary_of(g, x) for _ in range(g.ch.integer(2, 4))]
    if g.ch.flag():
        joined = branches[0]
        for branch in branches[1:]:
            joined.uses += 1
            branch.uses += 1
            joined = g.emit(relax.op.add(joined.expr, branch.expr), joined.scale + branch.scale)
    return True


OPS: list[tuple[str, Callable[[_Builder], bool]]] = [
    ("unary", _unary), ("binary", _binary), ("reduce", _reduce), ("softmax", _softmax),
    ("layer_norm", _layer_norm), ("matmul", _matmul), ("conv2d", _conv2d), ("reshape", _reshape),
    ("permute_dims", _transpose), ("strided_slice", _strided_slice), ("concat", _concat),
    ("split", _split), ("take", _take), ("fan_out", _fan_out),
]


def build_module(ch: Choices, config: GraphConfig = GraphConfig()) -> tvm.IRModule:
    """The generator: one module from the decisions ``ch`` makes (see the module docstring)."""
    bb = relax.BlockBuilder()
    g = _Builder(bb, ch, config)
    inputs = [g.new_input(g.shape()) for _ in range(ch.integer(1, config.max_inputs))]
    with bb.function("main"):
        with bb.dataflow():
            g.values.extend(inputs)
            for _ in range(ch.integer(1, config.max_ops)):
                _, op = ch.pick(OPS)
                if not op(g):
                    _unary(g)
            produced = g.values[len(inputs):]
            outputs = [v for v in produced if v.uses == 0]
            for v in produced:
                if v.uses and ch.integer(0, 3) == 0:  # an intermediate that is an output too
                    outputs.append(v)
            out_vars = [bb.emit_output(v.expr) for v in outputs]
        bb.emit_func_output(out_vars[0] if len(out_vars) == 1 else relax.Tuple(out_vars), g.params)
    return bb.get()


def random_module(seed: int, config: GraphConfig = GraphConfig()) -> tvm.IRModule:
    """The module of ``seed`` (reproducible; the driver of ``scripts/fuzz.py``)."""
    return build_module(RecordedChoices(seed), config)


def modules(config: GraphConfig = GraphConfig()):
    """A hypothesis strategy of modules (needs the ``dev`` extra)."""
    from hypothesis import strategies as st

    @st.composite
    def _modules(draw):
        return build_module(_DrawChoices(draw), config)

    return _modules()


def shrink_choices(values: Sequence[int], fails: Callable[[list[int]], bool],
                   budget: int = 60) -> list[int]:
    """Greedy minimisation of a failing choice sequence (what hypothesis does, in small): delete
    runs of choices (an op takes 3 to 8), then lower single choices towards 0, keeping every
    candidate for which ``fails(candidate)`` still holds; repeated while it makes progress, with at
    most ``budget`` calls of ``fails``."""
    best = list(values)
    calls = 0

    def attempt(candidate) -> bool:
        nonlocal best, calls
        if calls >= budget or candidate == best:
            return False
        calls += 1
        if fails(candidate):
            best = candidate
            return True
        return False

    progress = True
    while progress and calls < budget:
        start = list(best)
        for size in (8, 6, 5, 4, 3, 2, 1):
            i = 0
            while i < len(best) and calls < budget:
                if not attempt(best[:i] + best[i + size:]):
                    i += 1
        i = 0
        while i < len(best) and calls < budget:
            for lower in (0, best[i] // 2):
                if lower < best[i] and attempt(best[:i] + [lower] + best[i + 1:]):
                    break
            i += 1
        progress = best != start
    return best

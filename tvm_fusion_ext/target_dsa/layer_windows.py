"""Staging the layers of a sub-graph's kernel one window at a time (GraphTurbo's kernel
generation, graphturbo-dsa-scheduling.txt section 4: :mod:`.instance_staging`, :mod:`.intrinsics`).

Every layer of a ``graphturbo`` sub-graph sits in the root block's scope of one PrimFunc. A
schedule primitive on any block of a scope re-analyses the whole scope (TVM's
``ScheduleState::Replace`` and its block-scope updates), and creating a schedule or a PrimFunc
costs the function's size, its root allocations included; staging the layers of a chain kernel
one after the other on the whole function costs the number of layers times the function's size.
:class:`LayerWindows` applies each step (one layer's tiles in the layer-bound form, a run of
stitched layers, one anchor's operand staging in the pieces' loop, one GEMM's tensorization) to
a *window* instead: a PrimFunc with the same parameters and the root allocations its statements
touch, whose layers' sequence (the root's body, or the body of the root loop holding the layers)
keeps only

* the statements holding the step's blocks,
* every statement touching a buffer those touch (their producers and consumers, and those of
  the cache stages a step adds; TVM's ``compute_at`` checks that every consumer of a moved block
  is under the loop, ``cache_read`` places its stage by the buffer's writer),
* every statement writing a buffer one of these touches (a consumer moved into a layer's tile,
  such as an epilogue, keeps all its producers: ``reverse_compute_at`` checks them),

(a *local* step, one that changes only its own statements and the LB buffers they touch, such
as a tensorization, keeps only its statements and the others touching those LB buffers)
and one placeholder per run of the statements left out, so every kept statement keeps its
position (TVM inserts cache stages by position in the sequence). The staged window is spliced
back: its sequence, each placeholder replaced by its run, becomes the layers' sequence; its root
allocations replace theirs in the function's (primitives change them in place) and the ones it
added are appended, as TVM appends them. Root statements outside the layers' sequence (weight
promotions) that the window touches are kept around it, and every root statement touching a
buffer the step touches is among them. A step may rewrite them in place (a tensorization's
``transform_layout`` of a promoted weight): each is spliced back at its place. A step may add
root statements where TVM's ``cache_read`` puts the stage of an operand it could not move into a
loop: at the start of the root for a parameter, right before the loop for a buffer a root
statement writes; they go to the same place in the function's root
(:meth:`LayerWindows._splice_root`).

A step the window cannot decide - one that raises, that adds root statements elsewhere, removes
any or changes a parameter's layout, or that needs the whole function (:class:`WindowTooSmall`) -
is run on the whole function instead. The result is meant to be the one the whole function gives
(``tests/test_dsa_graphturbo_kernels.py`` compares both on ViT's chain kernel and on hand-written
pieces); docs/benchmarks.md records one DenseNet-121 kernel whose pooling is chunked differently
in its window than on the whole function.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from .tir_helpers import new_schedule

_LOG = logging.getLogger(__name__)
# What a window's placeholder statement says (:func:`_stub`).
_STUB = "dsa.window.outside:"


class WindowTooSmall(Exception):
    """A step found it needs more than its window (the caller reruns it on the whole function)."""


def _children(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _seq(stmts: list):
    return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]


def _with_body(loop: tirx.For, body) -> tirx.For:
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding,
                    loop.annotations, loop.step)


class LayerWindows:
    """The function being staged, step by step, through windows (module docstring).

    ``loop_var`` is the variable of the root loop whose body is the layers' sequence (the
    ``dsa.instances`` loop, the pieces' loop), None when the root's body is the sequence;
    ``windows=False`` runs every step on the whole function. Between steps the function is
    kept as its parts (root statements, the layers' sequence, root allocations); :attr:`func`
    assembles it."""

    def __init__(self, func: tirx.PrimFunc, loop_var: tvm.ir.Var | None, windows: bool = True):
        self.loop_var = loop_var
        self.windows = windows
        self._touched: dict = {}  # top-level statement -> :meth:`_touch`
        self._split(func)

    def _split(self, func: tirx.PrimFunc) -> None:
        self._func = self._base = func
        self.allocs = list(func.body.block.alloc_buffers)
        self.root = _children(func.body.block.body)
        self.index = None if self.loop_var is None else next(
            i for i, s in enumerate(self.root) if self._is_loop(s))
        self.layers = self.root if self.index is None else _children(self.root[self.index].body)

    def _is_loop(self, stmt) -> bool:
        """Whether ``stmt`` is the loop holding the layers' sequence."""
        return isinstance(stmt, tirx.For) and stmt.loop_var.same_as(self.loop_var)

    @property
    def func(self) -> tirx.PrimFunc:
        """The function as staged so far."""
        if self._func is None:
            self._func = self._assemble(_nest(self.root, self.index, self.layers), self.allocs)
        return self._func

    def stage(self, names: list[str], step, local: bool = False) -> None:
        """Run ``step(sch, rvs, whole)`` on a schedule holding the blocks ``names`` (``rvs``, in
        that order; ``whole`` says whether ``sch`` holds the whole function); it returns the
        staged schedule, or None to leave the function as it is. A ``local`` step changes only
        the statements holding its blocks and the LB buffers they touch (a tensorization): its
        window keeps those statements and the others touching those LB buffers."""
        if self.windows:
            try:
                if self._in_window(names, step, local):
                    return
            except Exception as err:  # noqa: BLE001 - the whole function raises it again, or not
                _LOG.debug("window of %s: %s; staged on the whole function", names, err)
        sch = new_schedule(self.func)
        staged = step(sch, _rvs(sch, names), True)
        if staged is not None:
            self._split(staged.mod["main"])

    def _touch(self, stmt) -> tuple[frozenset, frozenset, frozenset]:
        """Names of the blocks in ``stmt``, of the buffers they touch and of those they write."""
        hit = self._touched.get(stmt)
        if hit is None:
            blocks: list = []
            tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, blocks.append)])
            names = frozenset(b.name_hint for b in blocks)
            written = frozenset(r.source.name for b in blocks for r in b.writes)
            buffers = written | frozenset(r.source.name for b in blocks for r in b.reads)
            hit = self._touched[stmt] = (names, buffers, written)
        return hit

    def _assemble(self, root: list, allocs: list) -> tirx.PrimFunc:
        """The function with root statements ``root`` and root allocations ``allocs``."""
        realize = self._base.body
        block = realize.block
        return self._base.with_body(s_tir.SBlockRealize(
            realize.iter_values, realize.predicate,
            s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, _seq(root),
                         block.init, allocs, block.match_buffers, block.annotations)))

    def _in_window(self, names: list[str], step, local: bool = False) -> bool:
        """Whether ``step`` was staged on a window and spliced into the function."""
        layers = self.layers
        wanted = set(names)
        touch = [self._touch(s) for s in layers]
        targets = [i for i, t in enumerate(touch) if t[0] & wanted]
        if not targets:
            return False
        near = frozenset().union(*(touch[i][1] for i in targets))
        if local:
            near &= frozenset(b.name for b in self.allocs if b.scope().startswith("local"))
            far = near
            kept = set(targets) | {i for i, t in enumerate(touch) if t[1] & near}
        else:
            first = [i for i, t in enumerate(touch) if t[1] & near]
            far = frozenset().union(*(touch[i][1] for i in first))
            kept = set(first) | {i for i, t in enumerate(touch) if t[2] & far}
        window_layers, k = [], 0
        while k < len(layers):  # each run of statements left out is one placeholder
            if k in kept:
                window_layers.append(layers[k])
                k += 1
                continue
            end = k
            while end < len(layers) and end not in kept:
                end += 1
            window_layers.append(_stub(k, end))
            k = end
        outer = [] if self.index is None else [  # the root's other statements the window touches
            s for i, s in enumerate(self.root) if i != self.index and self._touch(s)[1] & far]
        picked = {id(s) for s in outer}
        window_root = [s for i, s in enumerate(self.root) if i == self.index or id(s) in picked]
        loop = None if self.index is None else next(
            k for k, s in enumerate(window_root) if self._is_loop(s))
        used = frozenset().union(*(self._touch(s)[1] for s in window_root if not self._is_loop(s)),
                                 *(touch[i][1] for i in kept))
        allocated = [k for k, buf in enumerate(self.allocs) if buf.name in used]
        window = self._assemble(_nest(window_root, loop, window_layers),
                                [self.allocs[k] for k in allocated])
        sch = new_schedule(window)
        staged = step(sch, [sch.get_sblock(n) for n in names], False)
        if staged is None or staged.mod["main"].same_as(window):
            return True
        staged = staged.mod["main"]
        allocs = list(staged.body.block.alloc_buffers)  # the window's, changed in place,
        if len(allocs) < len(allocated):  # and the new ones appended
            return False
        whole = list(self.allocs)
        for k, buf in zip(allocated, allocs):
            whole[k] = buf
        new_root = _children(staged.body.block.body)
        if self.index is None:
            self.root = self.layers = _unstub(new_root, layers)
        elif not self._splice_root(window_root, loop, new_root, staged, window, layers, local):
            return False
        self.allocs = whole + allocs[len(allocated):]
        self._func = None
        return True

    def _splice_root(self, window_root: list, loop: int, new_root: list, staged: tirx.PrimFunc,
                     window: tirx.PrimFunc, layers: list, local: bool) -> bool:
        """Whether the window's root after the step, ``new_root``, was spliced into the function's
        root (module docstring): the loop's body becomes the layers' sequence; a root statement
        the step rewrote replaces its original; statements the step added at the start of the
        window's root go to the start of the function's, those it added right before the loop
        right before the loop (where TVM's ``cache_read`` puts a stage of a parameter and of a
        buffer a root statement writes, ``CacheLocDetector`` in
        ``src/s_tir/schedule/primitive/cache_read_write.cc``: every statement touching that
        buffer is in the window, unless the step is ``local``)."""
        at = [k for k, stmt in enumerate(new_root) if self._is_loop(stmt)]
        added = at[0] - loop if len(at) == 1 else -1
        if added < 0 or (added and local) or len(new_root) - at[0] != len(window_root) - loop:
            return False  # a statement added after the loop, or removed
        if not all(a.same_as(b) for a, b in zip(staged.params, window.params)):
            return False  # a parameter's layout changed
        if added == 0:
            changed = {id(old): new for old, new in zip(window_root, new_root)
                       if not self._is_loop(new) and not old.same_as(new)}
            root = [changed.get(id(stmt), stmt) for stmt in self.root]
        else:
            kept = [stmt for k, stmt in enumerate(window_root) if k != loop]
            first = next((n for n in (range(added, -1, -1) if loop == 0 else range(added + 1))
                          if _same_statements(new_root[n:n + loop] + new_root[at[0] + 1:], kept)), None)
            if first is None:
                return False  # the window's statements rewritten as well, or added elsewhere
            root = [*new_root[:first], *self.root[:self.index], *new_root[first + loop:at[0]],
                    *self.root[self.index:]]
        self.layers = _unstub(_children(new_root[at[0]].body), layers)
        self.root = root
        self.index = next(k for k, stmt in enumerate(root) if self._is_loop(stmt))
        return True


def _same_statements(found: list, expected: list) -> bool:
    """Whether the statements ``found`` are ``expected``, one for one (rebuilt or not)."""
    return len(found) == len(expected) and all(
        a.same_as(b) or tvm_ffi.structural_equal(a, b) for a, b in zip(found, expected))


def _nest(root: list, index: int | None, layers: list) -> list:
    """``root`` with the layers' sequence ``layers`` as the body of its statement ``index`` (the
    instance loop), or ``layers`` itself without one."""
    if index is None:
        return layers
    return [_with_body(s, _seq(layers)) if i == index else s for i, s in enumerate(root)]


def _stub(start: int, end: int) -> tirx.Evaluate:
    """The placeholder of the layers' statements ``start`` to ``end`` (excluded) in a window: it
    keeps their place in the sequence (TVM inserts cache stages by position)."""
    return tirx.Evaluate(tvm.ir.StringImm(f"{_STUB}{start}:{end}"))


def _unstub(stmts: list, layers: list) -> list:
    """``stmts`` with every placeholder replaced by its statements of ``layers``."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.StringImm) \
                and stmt.value.value.startswith(_STUB):
            start, end = stmt.value.value[len(_STUB):].split(":")
            out += layers[int(start):int(end)]
        else:
            out.append(stmt)
    return out


def _rvs(sch: s_tir.Schedule, names: list[str]) -> list:
    """The block random variables of ``names`` (each must name exactly one block)."""
    found: dict[str, list] = {}

    def visit(rv):
        name = sch.get(rv).name_hint
        if name in wanted:
            found.setdefault(name, []).append(rv)
        for child in sch.get_child_blocks(rv):
            visit(child)

    wanted = set(names)
    visit(sch.get_sblock("root"))
    if any(len(found.get(n, [])) != 1 for n in names):
        raise WindowTooSmall(f"blocks {names} are not each found once")
    return [found[n][0] for n in names]

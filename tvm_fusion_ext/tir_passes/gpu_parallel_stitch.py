"""``GPUParallelStitch``: APOLLO's parallelism stitching (section 4.3) on CUDA, the independent
branches of a fused kernel in one launch.

dlight schedules every block of a fused PrimFunc on its own, so a kernel holding independent
branches (a multi-head / multi-tail group that APOLLO's Algorithm 3 composed with Cost Model (3))
is a sequence of top-level ``blockIdx.x`` loop nests, and TVM's ``SplitHostDevice`` makes each
nest a ``__global__`` function of its own, launched one after the other. This pass, run on the
scheduled kernels, walks the nests in program order and groups them into *stages*:

* a nest that shares no buffer with the nests of the current stage (no nest reads or writes what
  another writes) becomes a new *branch* of the stage;
* a nest that depends on exactly one branch joins that branch when the dependence stays inside
  each thread: both are ``blockIdx.x`` / ``threadIdx.x`` nests of the same extents, and every
  access of both to a buffer they share is one element, the same injective function of
  ``(blockIdx.x, threadIdx.x)`` (``tvm.sym.detect_iter_map``, bijective). Each thread then runs the
  consumer after its own producer, and no other thread touches that element;
* anything else starts a new stage (a later launch): the pass never reorders dependent work.

A stage of several branches becomes one launch: one ``blockIdx.x`` loop whose extent is the sum of
the branches' block counts, each branch under ``if offset <= blockIdx.x < offset + blocks`` with
its ``blockIdx.x`` replaced by ``blockIdx.x - offset``. A block-range guard is uniform over a
thread block, so a branch's ``__syncthreads()`` (cross-thread reductions, shared memory) stays
correct. Thread extents are unified to the stage's largest: a branch with fewer threads gets
``if threadIdx.x < threads`` around its thread loops, which is allowed only for branches without
shared memory or cross-thread reductions (a barrier inside a thread-divergent guard would hang);
a branch that would need one starts a new stage instead.

Blocks per branch: dlight fixes every branch's grid from its shapes (``Fallback`` maps one element
to each of ``ceil(n / 1024)`` blocks of 1024 threads, no grid-stride loop), so each branch keeps
its own block count; none of them is a free parameter that Cost Model (3) could divide. The
branches' blocks run side by side as far as the SMs hold them, which is the max term of (3).
Nests bound to other thread axes (``blockIdx.y``, ``threadIdx.y``, ``vthread``: dlight's
``Matmul``, compute-bound kernels that section 4.3 leaves out) and other top-level statements
are kept as they are and end the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir.stmt import SBlock, SBlockRealize

from ..ir_utils import with_functions
from ..registration import register_pass

BLOCK_AXIS = "blockIdx.x"
THREAD_AXIS = "threadIdx.x"
SYNC_SCOPES = ("shared", "shared.dyn", "warp")


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.GPUParallelStitch")
class GPUParallelStitch:
    """Module pass: every scheduled PrimFunc's independent launches stitched as the module
    docstring says; kernels with nothing to stitch are returned unchanged."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                stitched = stitch_launches(func)
                if not stitched.same_as(func):
                    updates[gvar] = stitched
        return with_functions(mod, updates)


@dataclass(eq=False)
class Nest:
    """One top-level ``blockIdx.x`` loop nest (or a chain of them joined thread by thread)."""

    loop: tirx.For
    blocks: int
    threads: int
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    synchronises: bool = False
    private: list = field(default_factory=list)

    @property
    def thread_var(self):
        """The ``threadIdx.x`` variable when the nest is ``for bx: for tx: ...``, else None."""
        inner = self.loop.body
        if isinstance(inner, tirx.For) and thread_tag(inner) == THREAD_AXIS:
            return inner.loop_var
        return None

    def depends_on(self, other: Nest) -> bool:
        return (any_same(self.writes, other.reads + other.writes)
                or any_same(other.writes, self.reads))

    def shared_buffers(self, other: Nest) -> list:
        """The buffers both nests access and at least one writes."""
        return [buf for buf in unique(self.reads + self.writes)
                if contains(other.writes, buf)
                or (contains(self.writes, buf) and contains(other.reads, buf))]


def stitch_launches(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its launches stitched (the module docstring), or ``func`` itself."""
    root = func.body
    if not isinstance(root, SBlockRealize):
        return func
    items = list(root.block.body.seq) if isinstance(root.block.body, tirx.SeqStmt) else [root.block.body]
    stages: list[list[Nest]] = []
    out: list = []
    private: list = []

    def close():
        if stages and stages[-1]:
            out.append(merge_branches(stages[-1]))
            private.extend(buf for branch in stages[-1] for buf in branch.private)
        stages.append([])

    stages.append([])
    for stmt in items:
        nest = analyse_nest(stmt)
        if nest is None:
            close()
            out.append(stmt)
            continue
        stage = stages[-1]
        dependent = [branch for branch in stage if nest.depends_on(branch)]
        if not dependent and fits_stage(stage, nest):
            stage.append(nest)
        elif len(dependent) == 1 and thread_private(dependent[0], nest):
            stage[next(i for i, branch in enumerate(stage) if branch is dependent[0])] = chain(dependent[0], nest)
        else:
            close()
            stages[-1].append(nest)
    close()
    if len(out) == len(items):
        return func
    block = root.block
    body = tirx.SeqStmt(out) if len(out) > 1 else out[0]
    allocations = list(block.alloc_buffers)
    for index, buf in enumerate(allocations):
        if buf.scope() == "global" and contains(private, buf) and sum(
                bool(element_accesses(item, buf)) for item in out) == 1:
            allocations[index] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope="local",
                                                 layout=buf.ty.layout)
            body = rename(body, {buf: allocations[index]})
    new_block = SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       allocations, block.match_buffers, block.annotations)
    return func.with_body(SBlockRealize(root.iter_values, root.predicate, new_block))


def analyse_nest(stmt) -> Nest | None:
    """The :class:`Nest` of ``stmt`` when it is a ``blockIdx.x`` loop from 0 whose only thread
    loops are ``threadIdx.x`` loops of one static extent; otherwise None."""
    if not (isinstance(stmt, tirx.For) and thread_tag(stmt) == BLOCK_AXIS and is_int(stmt.extent)
            and is_int(stmt.min) and stmt.min.value == 0):
        return None
    bound = []
    tvm_ffi.structural_walk(stmt.body, [(tirx.For, lambda loop: bound.append(loop)
                                         if loop.kind == tirx.ForKind.THREAD_BINDING else None)],
                            order="pre")
    extents = {loop.extent.value if is_int(loop.extent) else None for loop in bound}
    if (not bound or any(thread_tag(loop) != THREAD_AXIS for loop in bound) or len(extents) != 1
            or None in extents):
        return None
    nest = Nest(stmt, stmt.extent.value, extents.pop())
    thread_vars = [loop.loop_var for loop in bound]

    def visit(realize):
        block = realize.block
        nest.reads.extend(region.source for region in block.reads)
        nest.writes.extend(region.source for region in block.writes)
        buffers = [region.source for region in (*block.reads, *block.writes)] + list(block.alloc_buffers)
        if any(buf.scope() in SYNC_SCOPES for buf in buffers) or any(
                iv.iter_type == tirx.IterVar.CommReduce and uses_any(value, thread_vars)
                for iv, value in zip(block.iter_vars, realize.iter_values)):
            nest.synchronises = True

    tvm_ffi.structural_walk(stmt.body, [(SBlockRealize, visit)], order="pre")
    return nest


def fits_stage(stage: list[Nest], nest: Nest) -> bool:
    """Whether ``nest`` can be a branch of ``stage``: one index type for ``blockIdx.x`` and one
    thread extent that no synchronising branch has to be guarded down to."""
    branches = [*stage, nest]
    threads = max(branch.threads for branch in branches)
    return (len({branch.loop.loop_var.ty.dtype for branch in branches}) == 1
            and all(branch.threads == threads or not branch.synchronises for branch in branches))


def thread_private(producer: Nest, consumer: Nest) -> bool:
    """Whether ``consumer`` may run right after ``producer`` in each thread (module docstring)."""
    bx, tx = producer.loop.loop_var, producer.thread_var
    if (tx is None or consumer.thread_var is None or producer.blocks != consumer.blocks
            or producer.threads != consumer.threads or producer.synchronises or consumer.synchronises):
        return False
    renamed = rename(consumer.loop, {consumer.loop.loop_var: bx, consumer.thread_var: tx})
    domain = {bx: int_range(producer.blocks, bx.ty.dtype), tx: int_range(producer.threads, tx.ty.dtype)}
    analyzer = tvm.sym.Analyzer()
    for buf in producer.shared_buffers(consumer):
        indices = element_accesses(producer.loop, buf) + element_accesses(renamed, buf)
        if any(index is None or not uses_only(index, (bx, tx)) for index in indices):
            return False
        first = indices[0]
        if any(len(index) != len(first) or not all(analyzer.can_prove_equal(a, b) for a, b in zip(index, first))
               for index in indices[1:]):
            return False
        if not tvm.sym.detect_iter_map(list(first), domain, check_level="bijective").indices:
            return False
    return True


def chain(producer: Nest, consumer: Nest) -> Nest:
    """One nest running ``producer``'s then ``consumer``'s thread bodies (:func:`thread_private`)."""
    bx, tx = producer.loop.loop_var, producer.thread_var
    renamed = rename(consumer.loop, {consumer.loop.loop_var: bx, consumer.thread_var: tx})
    thread_loop = producer.loop.body
    body = tirx.SeqStmt([*flatten(thread_loop.body), *flatten(renamed.body.body)])
    loop = with_body(producer.loop, with_body(thread_loop, body))
    return Nest(loop, producer.blocks, producer.threads, producer.reads + consumer.reads,
                producer.writes + consumer.writes, False,
                unique(producer.private + consumer.private + producer.shared_buffers(consumer)))


def merge_branches(branches: list[Nest]):
    """One launch running ``branches`` side by side on consecutive block ranges."""
    if len(branches) == 1:
        return branches[0].loop
    first = branches[0].loop
    dtype = first.loop_var.ty.dtype
    block_var = tirx.Var(first.loop_var.name, dtype)
    threads = max(branch.threads for branch in branches)
    guarded, offset = [], 0
    for branch in branches:
        start = tirx.const(offset, dtype)
        body = rename(branch.loop.body, {branch.loop.loop_var: block_var - start})
        if branch.threads < threads:
            body = widen_thread_loops(body, branch.threads, threads)
        in_range = block_var < tirx.const(offset + branch.blocks, dtype)
        if offset:
            in_range = tirx.And(start <= block_var, in_range)
        guarded.append(tirx.IfThenElse(in_range, body, None))
        offset += branch.blocks
    axis = thread_axis(first, offset)
    return tirx.For(block_var, tirx.const(0, dtype), tirx.const(offset, dtype), tirx.ForKind.THREAD_BINDING,
                    tirx.SeqStmt(guarded), thread_binding=axis)


def widen_thread_loops(body, threads: int, widened: int):
    """``body``'s ``threadIdx.x`` loops of ``threads`` iterations run over ``widened`` threads,
    the extra ones doing nothing."""

    def widen(loop):
        if thread_tag(loop) != THREAD_AXIS:
            return loop
        var = loop.loop_var
        guarded = tirx.IfThenElse(var < tirx.const(threads, var.ty.dtype), loop.body, None)
        axis = thread_axis(loop, widened)
        return tirx.For(var, loop.min, tirx.const(widened, var.ty.dtype), loop.kind, guarded,
                        thread_binding=axis, annotations=loop.annotations)

    return tvm_ffi.structural_map(body, [(tirx.For, widen)])


def thread_axis(loop: tirx.For, extent: int) -> tirx.IterVar:
    """``loop``'s thread binding over ``extent`` threads (a domain only where ``loop``'s binding has
    one: TVMScript leaves it out)."""
    binding = loop.thread_binding
    dom = None if binding.dom is None else int_range(extent, binding.var.ty.dtype)
    return tirx.IterVar(dom, binding.var, tirx.IterVar.ThreadIndex, binding.thread_tag)


def element_accesses(stmt, buf) -> list:
    """Every access of ``stmt``'s blocks to ``buf`` as a tuple of indices in loop variables, or
    None for an access to more than one element."""
    found = []

    def visit(realize):
        bindings = dict(zip((iv.var for iv in realize.block.iter_vars), realize.iter_values))
        for region in (*realize.block.reads, *realize.block.writes):
            if not region.source.same_as(buf):
                continue
            if not all(is_int(r.extent) and r.extent.value == 1 for r in region.region):
                found.append(None)
                continue
            found.append(tuple(rename(r.min, bindings) for r in region.region))

    tvm_ffi.structural_walk(stmt, [(SBlockRealize, visit)], order="pre")
    return found


def rename(node, mapping: dict):
    """``node`` with the variables of ``mapping`` replaced by their expressions."""
    return tvm_ffi.structural_map(node, [(tvm.ir.Var, lambda var: next(
        (value for key, value in mapping.items() if key.same_as(var)), var))])


def with_body(loop: tirx.For, body) -> tirx.For:
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations)


def flatten(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def thread_tag(loop) -> str | None:
    if isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None:
        return loop.thread_binding.thread_tag
    return None


def int_range(extent: int, dtype: str) -> tvm.ir.Range:
    return tvm.ir.Range(tirx.const(0, dtype), tirx.const(extent, dtype))


def is_int(expr) -> bool:
    return isinstance(expr, tirx.IntImm)


def uses_any(node, variables) -> bool:
    found = []
    tvm_ffi.structural_walk(node, [(tvm.ir.Var, lambda v: found.append(v)
                                    if any(v.same_as(var) for var in variables) else None)], order="pre")
    return bool(found)


def uses_only(index, variables) -> bool:
    """Whether the expressions of ``index`` use no variable outside ``variables``."""
    found = []
    for expr in index:
        tvm_ffi.structural_walk(expr, [(tvm.ir.Var, lambda v: found.append(v))], order="pre")
    return all(any(v.same_as(var) for var in variables) for v in found)


def contains(buffers, buf) -> bool:
    return any(b.same_as(buf) for b in buffers)


def any_same(left, right) -> bool:
    return any(contains(right, buf) for buf in left)


def unique(buffers) -> list:
    kept = []
    for buf in buffers:
        if not contains(kept, buf):
            kept.append(buf)
    return kept

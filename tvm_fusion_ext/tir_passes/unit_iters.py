"""``DropUnitIters``: unit block iterators bound to constants, and the unused unit loops around
them, removed so that every block binding is trivial again.

The pipelines simplify every fused kernel with ``s_tir.transform.StmtSimplify``
(:mod:`tvm_fusion_ext.pipelines.phases`); on a batch of 1 that rewrites ``v_ax0 =
T.axis.spatial(1, ax0)`` into ``v_ax0 = T.axis.spatial(1, 0)`` and leaves the unit loop ``ax0``
unused. dlight's GPU rules start from ``normalize_prim_func``
(``python/tvm/s_tir/dlight/analysis/common_analysis.py``), which accepts only trivial bindings
(each block iterator bound to one loop variable) and declines such a kernel, Fallback included, so
the kernel keeps no thread binding and cannot be built for a GPU. This pass removes a block
iterator of extent 1 bound to a constant that the block no longer reads, then a serial loop of
extent 1 whose variable nothing uses; both are no-ops, so the kernel computes the same. Kernels
already scheduled (``tirx.is_scheduled``) are left alone.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir.stmt import SBlock, SBlockRealize

from ..ir_utils import with_functions
from ..registration import register_pass


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.DropUnitIters")
class DropUnitIters:
    """Module pass: the unit iterators and loops of the module docstring removed from every
    unscheduled PrimFunc."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and not (func.attrs or {}).get("tirx.is_scheduled", 0):
                rewritten = tvm_ffi.structural_map(func, [(SBlockRealize, _drop_iters)])
                rewritten = tvm_ffi.structural_map(rewritten, [(tirx.For, _drop_loop)])
                if not rewritten.same_as(func):
                    updates[gvar] = rewritten
        return with_functions(mod, updates)


def _drop_iters(realize: SBlockRealize) -> SBlockRealize:
    block = realize.block
    parts = [part for part in (block.body, block.init, *block.reads, *block.writes) if part is not None]
    keep = [i for i, (iv, value) in enumerate(zip(block.iter_vars, realize.iter_values))
            if not (_is_one(iv.dom.extent) and isinstance(value, tirx.IntImm)
                    and not any(_uses(part, iv.var) for part in parts))]
    if len(keep) == len(block.iter_vars):
        return realize
    new_block = SBlock([block.iter_vars[i] for i in keep], block.reads, block.writes,
                       block.name_hint, block.body, block.init, block.alloc_buffers,
                       block.match_buffers, block.annotations)
    return SBlockRealize([realize.iter_values[i] for i in keep], realize.predicate, new_block)


def _drop_loop(loop: tirx.For) -> tirx.Stmt:
    if (_is_one(loop.extent) and loop.kind == tirx.ForKind.SERIAL and not loop.annotations
            and not _uses(loop.body, loop.loop_var)):
        return loop.body
    return loop


def _is_one(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 1


def _uses(node, var) -> bool:
    found = []
    tvm_ffi.structural_walk(node, [(tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None)],
                            order="pre")
    return bool(found)

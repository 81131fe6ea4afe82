"""The DSA passes that run after the staging schedule (:class:`.schedule.DSASchedule`), in the
order the DSA backend (:mod:`tvm_fusion_ext.backends.dsa`) runs them: :class:`SeparateWideBuffers`
(LB/GB buffers of elements wider than 32 bits get a scope of their own width), then
:class:`AnnotateKernelModel`, which stores each kernel's model (:data:`MODEL_ATTR`) for the
simulator and the code generator (:mod:`.codegen`).
"""

from __future__ import annotations

import json

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..ir_utils import with_functions
from ..registration import register_pass
from .kernel_model import kernel_model
from .schedule import GB, LB
from .tir_helpers import new_schedule

MODEL_ATTR = "dsa.kernel_model"
# TVM's StorageRewrite packs all allocations of one tagged scope (``local.dsa_lb``,
# ``global.dsa_gb``) into one buffer at 32-bit offsets: wider elements need a scope of their own.
PACK_BITS = 32


def width_scope(scope: str, bits: int) -> str:
    """The scope a buffer of ``bits``-bit elements takes in the DSA scratchpad ``scope``:
    ``scope`` itself up to :data:`PACK_BITS`, else ``scope.b<bits>`` (same memory level)."""
    return scope if bits <= PACK_BITS else f"{scope}.b{bits}"


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.SeparateWideBuffers")
class SeparateWideBuffers:
    """Move LB/GB buffers of elements wider than :data:`PACK_BITS` to :func:`width_scope`.

    StorageRewrite merges every allocation of a tagged scope into one, each member at the next
    32-bit offset, and fails (``bits_offset % elem_bits``) when e.g. an ``int64`` index buffer
    follows three ``float32`` ones. One scope per element width keeps every offset a multiple of
    the element size; the memory level (:func:`.kernel_model.level_of`) is unchanged.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                moved = _separate_wide(func)
                if moved is not None:
                    updates[gvar] = moved
        return with_functions(mod, updates)


def _separate_wide(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """``func`` with its wide LB/GB buffers re-scoped (``set_scope`` on a writing block), or
    None when it has none."""
    blocks = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)], order="pre")
    wide = {buf.name for block in blocks for buf in block.alloc_buffers
            if buf.scope() in (LB, GB) and buf.dtype.bits > PACK_BITS}
    if not wide:
        return None
    sch = new_schedule(func)
    for block in blocks:
        for index, region in enumerate(block.writes):
            buf = region.source
            if buf.name in wide and buf.scope() in (LB, GB):
                wide.discard(buf.name)
                sch.set_scope(sch.get_sblock(block.name_hint), index,
                              width_scope(buf.scope(), buf.dtype.bits))
    return sch.mod["main"]


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.AnnotateKernelModel")
class AnnotateKernelModel:
    """Attach ``dsa.kernel_model`` (JSON of :func:`.kernel_model.kernel_model`) to every PrimFunc."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                model = kernel_model(func, gvar.name_hint)
                updates[gvar] = func.with_attr(MODEL_ATTR, json.dumps(model, sort_keys=True))
        return with_functions(mod, updates)

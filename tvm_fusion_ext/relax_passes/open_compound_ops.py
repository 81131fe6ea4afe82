"""``OpenCompoundOps``: APOLLO section 3.2, breaking compound ops into primitive ops.

After ``LegalizeOps`` a compound op (softmax, log_softmax, layer_norm, rms_norm, group_norm, mean,
variance, ...) is one ``call_tir`` whose PrimFunc holds several loop nests of different APOLLO
types: its op boundary hides the reduction inside it from the aggregation rules (Fig. 3(b)). This
pass splits such a PrimFunc at its top-level loop nests into one PrimFunc per nest and replaces the
call by a chain of ``call_tir``s whose intermediates become Relax tensors, so every ``call_tir``
APOLLO sees is one primitive with one type (Fig. 3(c)). Each piece's PrimFunc names the compound
op and its position in it (``COMPOUND_OP_ATTR``, ``COMPOUND_PIECE_ATTR`` of
:mod:`tvm_fusion_ext.analysis.graph`), so a partition can close an op it fused with nothing else
(:mod:`tvm_fusion_ext.partitioners.apollo.compound_ops`).

Why the TIR level rather than Relax-level decomposition rules: the split works for every compound
op ``LegalizeOps`` produces (and any custom multi-nest PrimFunc) without one rule per Relax op, the
primitive types come from the same index-map classification as everything else, and the pass
runs after the shared pre-processing (which legalizes) without changing its order.

What is *not* split: a pure data-movement nest (no arithmetic, e.g. the padding before a conv or
a pooling) stays with the nest that consumes it, since it is that op's boundary handling, not a
fusion boundary; PrimFuncs whose nests all have one type (e.g. gelu's element-wise chain) are
already primitive for Table 1; ``call_tir_inplace``, calls with symbolic ``tir_vars`` and
functions outside the root-block-of-nests shape are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.graph import COMPOUND_OP_ATTR, COMPOUND_PIECE_ATTR
from ..analysis.primitive_types import classify_block
from ..ir_utils import non_primitive_functions
from ..registration import register_pass

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@dataclass
class _Piece:
    """Consecutive top-level loop nests that become one primitive PrimFunc."""

    stmts: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    types: set = field(default_factory=set)
    reads: list = field(default_factory=list)  # buffer vars, first-read order
    writes: list = field(default_factory=list)


def _blocks_of(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, found.append)], order="pre")
    return found


def _add(seq: list, buf) -> None:
    if not any(b.same_as(buf) for b in seq):
        seq.append(buf)


def _contains(seq, buf) -> bool:
    return any(b.same_as(buf) for b in seq)


def split_pieces(func: tirx.PrimFunc) -> list[_Piece] | None:
    """The primitive pieces of ``func`` (None when it is not a root block of loop nests)."""
    root = func.body
    if not isinstance(root, s_tir.SBlockRealize) or root.block.name_hint != "root":
        return None
    body = root.block.body
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    pending: list = []  # data-movement nests waiting for their consumer
    pieces: list[_Piece] = []
    for stmt in stmts:
        blocks = _blocks_of(stmt)
        if not blocks:
            return None
        infos = [classify_block(b) for b in blocks]
        if all(info.flops == 0 for info in infos):
            pending.append((stmt, blocks))
            continue
        piece = _Piece()
        for s, bs in pending:
            piece.stmts.append(s)
            piece.blocks.extend(bs)
        pending = []
        piece.stmts.append(stmt)
        piece.blocks.extend(blocks)
        piece.types = {info.ptype for info in infos}
        pieces.append(piece)
    if pending:
        if not pieces:
            return None
        for s, bs in pending:
            pieces[-1].stmts.append(s)
            pieces[-1].blocks.extend(bs)
    for piece in pieces:
        for block in piece.blocks:
            for w in block.writes:
                _add(piece.writes, w.source)
            for r in block.reads:
                if not _contains(piece.writes, r.source):
                    _add(piece.reads, r.source)
    return pieces


def is_compound(pieces: list[_Piece] | None) -> bool:
    """Several pieces of more than one APOLLO type: the op boundary hides a fusion choice."""
    return pieces is not None and len(pieces) > 1 and len(set().union(*(p.types for p in pieces))) > 1


def _piece_function(func: tirx.PrimFunc, piece: _Piece, inputs: list, outputs: list,
                    compound: str, position: int) -> tirx.PrimFunc:
    root = func.body.block
    local = [b for b in root.alloc_buffers
             if not _contains(inputs, b) and not _contains(outputs, b)
             and (_contains(piece.writes, b) or _contains(piece.reads, b))]
    body = piece.stmts[0] if len(piece.stmts) == 1 else tirx.SeqStmt(piece.stmts)
    block = s_tir.SBlock([], [], [], "root", body, alloc_buffers=local)
    realize = s_tir.SBlockRealize([], True, block)
    attrs = {k: v for k, v in (func.attrs or {}).items() if k not in ("op_pattern", "global_symbol")}
    attrs[COMPOUND_OP_ATTR] = compound
    attrs[COMPOUND_PIECE_ATTR] = position
    return tirx.PrimFunc(list(inputs) + list(outputs), realize,
                         attrs=tvm.ir.make_node("ir.DictAttrs", **attrs))


def _static_params(func: tirx.PrimFunc) -> bool:
    """Every parameter is a buffer of static shape (symbolic shapes keep the op whole)."""
    try:
        return all(all(isinstance(int(d), int) for d in p.ty.shape) for p in func.params)
    except (TypeError, ValueError, AttributeError):
        return False


def _tensor_type(buf) -> relax.TensorType:
    return relax.TensorType([int(d) for d in buf.ty.shape], str(buf.ty.dtype))


@mutator
class _Opener(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod
        self.opened = 0

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if not call.op.same_as(_CALL_TIR) or len(call.args) != 2:
            return call
        gvar = call.args[0]
        func = self.mod[gvar]
        if not isinstance(func, tirx.PrimFunc):
            return call
        args = list(call.args[1].fields)
        if len(func.params) < len(args):
            return call
        if not _static_params(func):
            return call
        pieces = split_pieces(func)
        if not is_compound(pieces):
            return call
        return self._open(gvar.name_hint, func, pieces, args)

    def _open(self, name: str, func: tirx.PrimFunc, pieces: list[_Piece], args: list):
        params = list(func.params)
        finals = params[len(args):]
        value = {p: a for p, a in zip(params, args)}  # buffer var -> Relax expr

        def lookup(buf):
            return next(v for b, v in value.items() if b.same_as(buf))

        for i, piece in enumerate(pieces):
            later_reads = [r for p in pieces[i + 1:] for r in p.reads]
            inputs = list(piece.reads)
            outputs = [b for b in piece.writes if _contains(finals, b) or _contains(later_reads, b)]
            prim = _piece_function(func, piece, inputs, outputs, name, i)
            block_name = piece.blocks[-1].name_hint
            gv = self.builder_.add_func(prim, f"{name}_{block_name}")
            out_ty = [_tensor_type(b) for b in outputs]
            call = relax.call_tir(gv, [lookup(b) for b in inputs],
                                  out_ty=out_ty[0] if len(out_ty) == 1 else out_ty)
            result = self.builder_.emit(call, name_hint=block_name)
            if len(outputs) == 1:
                value[outputs[0]] = result
            else:
                for j, b in enumerate(outputs):
                    value[b] = self.builder_.emit(relax.TupleGetItem(result, j), name_hint=b.name)
        self.opened += 1
        results = [lookup(b) for b in finals]
        return results[0] if len(results) == 1 else relax.Tuple(results)


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.OpenCompoundOps")
class OpenCompoundOps:
    """Module pass: split every compound ``call_tir`` into primitive ones (see module docstring).

    Run after ``LegalizeOps``; follow with ``AnnotateTIROpPattern`` (the new PrimFuncs have no
    ``op_pattern``) and ``DeadCodeElimination`` (the compound PrimFuncs become unused).
    ``opened`` counts the calls split by the last run.
    """

    def __init__(self):
        self.opened = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        self.opened = 0
        for gvar, func in non_primitive_functions(mod):
            opener = _Opener(mod)
            new_func = opener.visit_expr(func)
            if opener.opened:
                self.opened += opener.opened
                opener.builder_.update_func(gvar, new_func)
                mod = opener.builder_.get()
        return mod

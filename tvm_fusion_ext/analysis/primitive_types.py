"""APOLLO primitive-op types computed from TIR index maps (apollo-fusion.txt section 3.3).

For every load of a block, the dataflow relation ``I_k -> O`` is read off the index expressions of
the load and of the block's store (never off op names). Dimensions are compared position by
position, as Equation (2) does after broadcasting both tensors to the output's rank:

* a 1-D function is *bijective* when the input dimension is indexed by the same spatial iterator as
  the output dimension, *injective* when the input dimension is absent or constant while the output
  iterates over it (broadcast), *surjective* when the input dimension is walked by a reduction
  iterator that the output does not have, and *general* otherwise (permuted, strided, windowed,
  reshaped or data-dependent indexing);
* Definitions 1-4 then give the block's type: element-wise, broadcast, reduction or opaque.

Table 1 also needs three opaque sub-kinds: transpose, matmul and conv. They are recognised from the
same index maps (a pure permutation; reductions whose operands each miss an output iterator; a
reduction that reads a sliding window). A PrimFunc with several blocks (softmax, layer norm, conv
with padding) is a compound op: :func:`classify_prim_func` returns the type of each block and the
op's overall type.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx

from ..ir_utils import StructuralMemo


class Relation(enum.Enum):
    """Dataflow relation of one input w.r.t. the output (section 3.3, items 1-4)."""

    BIJECTIVE = "bijective"
    INJECTIVE = "injective"
    SURJECTIVE = "surjective"
    GENERAL = "general"


class PrimitiveType(enum.Enum):
    """APOLLO's primitive types (Definitions 1-4) with Table 1's opaque sub-kinds."""

    ELEMENTWISE = "element-wise"
    BROADCAST = "broadcast"
    REDUCTION = "reduction"
    TRANSPOSE = "transpose"
    MATMUL = "matmul"
    CONV = "conv"
    OPAQUE = "opaque"
    # Opaque sub-kinds that only move data: reshapes, and other data movement (slicing,
    # concatenation, padding, gathers). Not produced by the classifier below: APOLLO's partitioner
    # refines OPAQUE into them (partitioners.apollo.micro_graphs.apollo_type).
    RESHAPE = "reshape"
    DATA_MOVEMENT = "data-movement"

    @property
    def is_opaque(self) -> bool:
        """Definition 4 holds for the sub-kinds too: each has a general dataflow relation."""
        return self in (PrimitiveType.TRANSPOSE, PrimitiveType.MATMUL, PrimitiveType.CONV,
                        PrimitiveType.OPAQUE, PrimitiveType.RESHAPE, PrimitiveType.DATA_MOVEMENT)


CLASSIFIED_MEMO_SIZE = 2048  # PrimFunc types :func:`classify_prim_func` remembers
_CLASSIFIED = StructuralMemo(CLASSIFIED_MEMO_SIZE)

# Which block type names a compound op: the first one present in this order wins.
_COMPOUND_PRIORITY = (PrimitiveType.CONV, PrimitiveType.MATMUL, PrimitiveType.OPAQUE,
                      PrimitiveType.TRANSPOSE, PrimitiveType.REDUCTION, PrimitiveType.BROADCAST,
                      PrimitiveType.ELEMENTWISE)


@dataclass(frozen=True)
class BlockInfo:
    """The APOLLO type of one TIR block, with the relations of its loads and a FLOP estimate."""

    name: str
    ptype: PrimitiveType
    relations: tuple[Relation, ...]
    flops: int


@dataclass(frozen=True)
class OpClassification:
    """The type of a (possibly compound) primitive op and of each of its blocks."""

    ptype: PrimitiveType
    blocks: tuple[BlockInfo, ...]
    flops: int

    @property
    def is_compound(self) -> bool:
        return len(self.blocks) > 1


# --------------------------------------------------------------------------------------------
# One index dimension
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Dim:
    """One index expression of a load, decomposed as an affine form over the block iterators."""

    coeffs: tuple[int, ...] | None  # None: not affine (floordiv, data-dependent, ...)
    offset: int | None

    def single_iter(self) -> int | None:
        """Position of the iterator when the index is exactly ``iter`` (coefficient 1, offset 0)."""
        if self.coeffs is None or self.offset != 0:
            return None
        nonzero = [i for i, c in enumerate(self.coeffs) if c]
        return nonzero[0] if len(nonzero) == 1 and self.coeffs[nonzero[0]] == 1 else None

    def is_constant(self) -> bool:
        return self.coeffs is not None and not any(self.coeffs)


def _contains_load(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, found.append)])
    return bool(found)


def _affine(expr, iters) -> _Dim:
    if _contains_load(expr):
        return _Dim(None, None)
    coeffs = sym.detect_linear_equation(expr, iters)
    if len(coeffs) == 0:
        return _Dim(None, None)
    try:
        values = [int(tvm.sym.Analyzer().simplify(c)) for c in coeffs]
    except (TypeError, ValueError):
        return _Dim(None, None)
    return _Dim(tuple(values[:-1]), values[-1])


# --------------------------------------------------------------------------------------------
# Relations and block types
# --------------------------------------------------------------------------------------------
def _load_relation(load_dims: list[_Dim], load_extents: list[int], out_iters: list[int],
                   spatial: set[int], reduce: set[int], extents: list[int]) -> Relation:
    """Equation (2): the relation of one load, given the output's iterator per dimension.

    ``out_iters`` lists, per output dimension, the iterator indexing it. Iterators of extent 1 carry
    no data movement and are ignored.
    """
    used = []
    for dim, dim_extent in zip(load_dims, load_extents):
        it = dim.single_iter()
        if it is not None:
            if extents[it] > 1:
                used.append(it)
        elif not (dim.is_constant() and dim_extent == 1):
            return Relation.GENERAL
    if len(set(used)) != len(used):
        return Relation.GENERAL
    used_spatial = [it for it in used if it in spatial]
    order = [it for it in out_iters if it in used_spatial]
    if used_spatial != order or any(it not in out_iters for it in used_spatial):
        return Relation.GENERAL  # permuted: the 1-D functions do not line up with the output
    missing = [it for it in out_iters if extents[it] > 1 and it not in used_spatial]
    reduced = [it for it in used if it in reduce]
    if reduced and missing:
        return Relation.GENERAL  # a reduced input dimension sits where the output iterates
    if reduced:
        return Relation.SURJECTIVE
    return Relation.INJECTIVE if missing else Relation.BIJECTIVE


def _is_window(dim: _Dim, spatial: set[int], reduce: set[int]) -> bool:
    """``s * stride + r * dilation (+ offset)``: the access of a convolution or a pooling."""
    if dim.coeffs is None:
        return False
    nonzero = {i for i, c in enumerate(dim.coeffs) if c}
    return bool(nonzero & spatial) and bool(nonzero & reduce)


_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.Max, tirx.Min, tvm.ir.Call)


def _count_arith(expr) -> int:
    """Arithmetic operations in a stored value: index arithmetic and selects are not counted."""
    def count(node) -> int:
        found = []
        tvm_ffi.structural_walk(node, [(_ARITH, found.append)])
        return sum(1 for f in found if not (isinstance(f, tvm.ir.Call)
                                           and getattr(f.op, "name", "") in ("prim.if_then_else", "tirx.if_then_else")))

    loads = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, loads.append)])
    return count(expr) - sum(count(i) for ld in loads for i in ld.indices)


def classify_block(block: s_tir.SBlock) -> BlockInfo:
    """Definitions 1-4 (and Table 1's sub-kinds) for one TIR block."""
    iters = [iv.var for iv in block.iter_vars]
    extents = []
    for iv in block.iter_vars:
        extent = iv.dom.extent
        extents.append(int(extent) if isinstance(extent, (tirx.IntImm, int)) else 2)
    spatial = {i for i, iv in enumerate(block.iter_vars) if iv.iter_type == 0}
    reduce = {i for i, iv in enumerate(block.iter_vars) if iv.iter_type == 2}
    flops = int(np.prod(extents)) if extents else 1

    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return BlockInfo(block.name_hint, PrimitiveType.OPAQUE, (), flops)
    flops *= _count_arith(store.value)
    out_dims = [_affine(e, iters) for e in store.indices]
    out_iters = [d.single_iter() for d in out_dims]
    if any(it is None and not d.is_constant() for it, d in zip(out_iters, out_dims)):
        return BlockInfo(block.name_hint, PrimitiveType.OPAQUE, (), flops)
    out_iters = [it for it in out_iters if it is not None]

    loads = []
    tvm_ffi.structural_walk(store.value, [(tvm.ir.TensorLoad, loads.append)])
    loads = [ld for ld in loads if not ld.source.same_as(store.buffer)]  # reduction self-read
    relations, windows, operands = [], False, set()
    for load in loads:
        dims = [_affine(e, iters) for e in load.indices]
        shape = [int(s) if isinstance(s, (tirx.IntImm, int)) else 2 for s in load.source.shape]
        relations.append(_load_relation(dims, shape, out_iters, spatial, reduce, extents))
        windows |= any(_is_window(d, spatial, reduce) for d in dims)
        operands.add(load.source)
    return BlockInfo(block.name_hint, _block_type(relations, reduce, windows, len(operands), loads,
                                                  iters, out_iters, extents), tuple(relations), flops)


def _block_type(relations, reduce, windows, n_operands, loads, iters, out_iters, extents):
    if all(r is Relation.BIJECTIVE for r in relations):
        return PrimitiveType.ELEMENTWISE  # Definition 1 (constants / no inputs included)
    if Relation.GENERAL not in relations:
        if Relation.SURJECTIVE in relations:
            return PrimitiveType.REDUCTION  # Definition 3
        return PrimitiveType.BROADCAST  # Definition 2
    # Definition 4: opaque, with Table 1's sub-kinds.
    if reduce and n_operands >= 2:
        return PrimitiveType.CONV if windows else PrimitiveType.MATMUL
    if not reduce and len(loads) == 1 and _is_permutation(loads[0], iters, out_iters, extents):
        return PrimitiveType.TRANSPOSE
    return PrimitiveType.OPAQUE


def _is_permutation(load, iters, out_iters, extents) -> bool:
    dims = [_affine(e, iters) for e in load.indices]
    used = [d.single_iter() for d in dims]
    if any(u is None for u in used):
        return False
    moving = [u for u in used if extents[u] > 1]
    expected = [it for it in out_iters if extents[it] > 1]
    return sorted(moving) == sorted(expected) and moving != expected


def prim_func_blocks(func: tirx.PrimFunc) -> list[s_tir.SBlock]:
    """The blocks of a PrimFunc in program order, without the implicit root block."""
    blocks = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)], order="pre")
    return [b for b in blocks if b.name_hint != "root"]


def indexed_by_data(region) -> bool:
    """Whether a block's buffer region is indexed by values loaded from memory (a gather such as
    ``take``'s table): the slice it reads is only known once those loads ran."""
    loads: list = []
    for rng in region.region:
        tvm_ffi.structural_walk(rng.min, [(tvm.ir.TensorLoad, loads.append)])
        tvm_ffi.structural_walk(rng.extent, [(tvm.ir.TensorLoad, loads.append)])
    return bool(loads)


def is_gather(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` is a gather, as ``take`` legalizes: one block, no reduction iterator, no
    arithmetic, storing each output element from an input read at indices loaded from another
    input. TVM's ``AnnotateTIROpPattern`` marks it opaque (src/relax/analysis/tir_op_pattern_kind.cc:
    the load's index is not an affine function of the block iterators), yet it moves data
    element for element like an injective op."""
    blocks = prim_func_blocks(func)
    if len(blocks) != 1:
        return False
    block = blocks[0]
    if any(iv.iter_type != 0 for iv in block.iter_vars) or not isinstance(block.body, tirx.BufferStore):
        return False
    if _count_arith(block.body.value) or not isinstance(block.body.value, tvm.ir.TensorLoad):
        return False
    return any(indexed_by_data(r) for r in block.reads)


def classify_prim_func(func: tirx.PrimFunc) -> OpClassification:
    """Type of every block of ``func`` and of the op as a whole (section 3.2: compound ops).

    A compound op is named by its dominant block: conv / matmul first, then other opaque blocks,
    transposes, reductions, broadcasts and element-wise blocks, in that order. The result (plain
    data) is remembered per structure: a model's repeated layers share their PrimFuncs' types, and
    every graph view of a module asks again.
    """
    return _CLASSIFIED.get(func, lambda: _classify(func))


def _classify(func: tirx.PrimFunc) -> OpClassification:
    blocks = tuple(classify_block(b) for b in prim_func_blocks(func))
    if not blocks:
        return OpClassification(PrimitiveType.OPAQUE, (), 0)
    present = {b.ptype for b in blocks}
    ptype = next(t for t in _COMPOUND_PRIORITY if t in present)
    return OpClassification(ptype, blocks, sum(b.flops for b in blocks))

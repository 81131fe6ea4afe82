"""Gathers (``take``) in GraphTurbo's sub-graphs (graphturbo-dsa-scheduling.txt section 3.5: data
movement stitched into the kernels around it): ``analysis.primitive_types.is_gather``,
``TurboGraph.fusible_together``, a concatenation's loads in the DSA kernel model, and an
embedding model compiled for ``dsa/stcp920``."""

import math

import numpy as np
import tvm
from dsa_cases.matrix_unit import TARGET
from tvm import relax
from tvm.script import tirx as T

import tvm_fusion_ext  # noqa: F401  (registers the strategies and the DSA target)
from tvm_fusion_ext.analysis.primitive_types import is_gather, prim_func_blocks
from tvm_fusion_ext.driver.static_profile import static_profile
from tvm_fusion_ext.partitioners.graphturbo import TurboGraph, TurboOp, group_subgraphs
from tvm_fusion_ext.target_dsa.kernel_model import element_loads, loaded_buffers, read_in_place


def _legalized(build) -> tvm.tirx.PrimFunc:
    """The PrimFunc ``LegalizeOps`` makes of the one op ``build()`` returns with its params."""
    bb = relax.BlockBuilder()
    params, op = build()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(op)
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    return next(f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))


def _var(name, shape, dtype="float32"):
    return relax.Var(name, relax.TensorType(shape, dtype))


def test_is_gather_tells_a_take_from_other_data_movement():
    """A ``take`` (TVM marks it opaque: its load's index is loaded) is a gather; a concatenation,
    a transpose and an element-wise op are not."""
    table, idx = _var("table", (10, 4)), _var("idx", (6,), "int32")
    a, b = _var("a", (6, 4)), _var("b", (6, 4))
    take = _legalized(lambda: ([table, idx], relax.op.take(table, idx, axis=0)))
    assert is_gather(take)
    assert not is_gather(_legalized(lambda: ([a, b], relax.op.concat([a, b], axis=1))))
    assert not is_gather(_legalized(lambda: ([a], relax.op.permute_dims(a))))
    assert not is_gather(_legalized(lambda: ([a, b], relax.op.add(a, b))))


def test_element_loads_count_one_branch_of_a_concatenation():
    """Each element of a concatenation comes from one of its inputs: one load per element in the
    kernel model (every branch's load was counted before: 3x the bytes for three inputs)."""
    parts = [_var(f"x{i}", (6, 4)) for i in range(3)]
    func = _legalized(lambda: (parts, relax.op.concat(parts, axis=1)))
    store = prim_func_blocks(func)[0].body
    assert len(loaded_buffers(store.value)) == 3
    assert len(element_loads(store.value)) == 1


def _op(name, shape, inputs=(), **kw):
    return TurboOp(name, tuple(shape), math.prod(shape) * 4, list(inputs), flops=math.prod(shape), **kw)


def test_a_gather_joins_its_consumer_but_never_the_producer_of_its_table():
    """A gather reads its table in place at loaded indices, so a table computed in the graph must
    be whole in memory before the gather's kernel starts: the gather may share a kernel with its
    index and its consumers, never with its table's producer."""
    graph = TurboGraph([
        _op("table", (64, 16)),                                   # 0: computed table
        _op("index", (32,)),                                      # 1: indices
        _op("gather", (32, 16), [0, 1], gathers_from=frozenset({0})),  # 2
        _op("relu", (32, 16), [2]),                               # 3
    ])
    assert graph.fusible_together([1, 2, 3])
    assert not graph.fusible_together([0, 2])
    grouping = group_subgraphs(graph, lb_bytes=1 << 20, max_ops=None)
    owner = {op: i for i, group in enumerate(grouping.groups) for op in group}
    assert owner[2] == owner[3] and owner[0] != owner[2]


def _embedding_mlp(n: int, tables: int, rows: int, dim: int, out: int, seed: int = 0) -> tvm.IRModule:
    """DLRM's sparse half: per table, a column of the index matrix, the embedding rows it selects,
    then the concatenated embeddings through a linear layer and ReLU; tables and weight constant."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    idx = _var("idx", (n, tables), "int64")
    with bb.function("main", [idx]):
        with bb.dataflow():
            embs = []
            for t in range(tables):
                column = bb.emit(relax.op.take(idx, relax.const(t, "int64"), axis=1))
                table = relax.const(rng.uniform(-1, 1, (rows, dim)).astype("float32"))
                embs.append(bb.emit(relax.op.take(table, column, axis=0)))
            cat = bb.emit(relax.op.concat(embs, axis=1))
            weight = relax.const(rng.uniform(-1, 1, (tables * dim, out)).astype("float32"))
            out_var = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.matmul(cat, weight))))
        bb.emit_func_output(out_var)
    return bb.get()


def test_embedding_lookups_run_in_the_kernel_of_their_consumer():
    """The lookups, the concatenation and the linear layer are one ``graphturbo`` kernel on the
    DSA (``stock`` leaves every ``take`` a kernel of its own, its output through DDR), faster in
    the simulator, and the compiled model computes what ``llvm`` does."""
    mod = _embedding_mlp(n=128, tables=4, rows=100, dim=16, out=32)
    fused, stock = static_profile(mod, "graphturbo", TARGET), static_profile(mod, "stock", TARGET)
    assert fused["kernels"] == 1 and stock["kernels"] > 4
    assert fused["cycles"] < stock["cycles"]
    idx = np.random.default_rng(1).integers(0, 100, (128, 4)).astype("int64")
    inputs = [tvm.runtime.tensor(idx)]
    expected = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*inputs).numpy()
    ex = tvm.compile(mod, target=tvm.target.Target(TARGET), relax_pipeline="tvm_fusion_ext.graphturbo")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*inputs).numpy()
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@T.prim_func(s_tir=True)
def _two_columns(x: T.Buffer((8, 4), "float32"), y: T.Buffer((8, 2), "float32")):
    for i, j in T.grid(8, 2):
        with T.sblock("pick"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(x[vi, 0:4])
            T.writes(y[vi, vj])
            y[vi, vj] = T.if_then_else(vj == 0, x[vi, 1], x[vi, 3])


@T.prim_func(s_tir=True)
def _self_concat(x: T.Buffer((8, 2), "float32"), y: T.Buffer((8, 4), "float32")):
    for i, j in T.grid(8, 4):
        with T.sblock("concat"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(x[vi, vj])
            T.writes(y[vi, vj])
            y[vi, vj] = T.if_then_else(vj < 2, x[vi, vj], x[vi, vj - 2])


def test_a_buffer_loaded_at_several_indices_is_staged_where_its_region_covers_them():
    """A block loading one buffer at several indices reads it in place only where its ``T.reads``
    region misses some of them (a concatenation of a tensor with itself keeps one region after
    ``FuseTIR``); DLRM's index columns, all inside the region, are staged."""
    for func, in_place in ((_two_columns, False), (_self_concat, True)):
        block = prim_func_blocks(func)[0]
        assert read_in_place(block, block.reads[0]) is in_place

"""The graph view of a dataflow block and the helpers every partitioner uses."""

import pytest
import tvm
from cases import foundation
from tvm import relax

from tvm_fusion_ext.analysis.graph import DataflowGraph, NodeKind, OpPattern, build_graph
from tvm_fusion_ext.analysis.primitive_types import PrimitiveType


def _legalize(mod):
    return relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(mod))


def test_conv_bias_relu_softmax_nodes():
    graph = build_graph(_legalize(foundation.ConvBiasReluSoftmax))
    assert [n.name for n in graph.nodes] == ["c", "a", "r", "s"]
    assert [n.callee for n in graph.nodes] == ["conv2d", "add", "relu", "softmax"]
    assert [n.pattern for n in graph.nodes] == [OpPattern.OUT_EWISE_FUSABLE, OpPattern.ELEMWISE,
                                                OpPattern.ELEMWISE, OpPattern.OUT_EWISE_FUSABLE]
    assert [n.ptype for n in graph.nodes] == [PrimitiveType.CONV, PrimitiveType.BROADCAST,
                                              PrimitiveType.ELEMENTWISE, PrimitiveType.REDUCTION]
    assert [n.inputs for n in graph.nodes] == [[], [0], [1], [2]]
    assert [n.outputs for n in graph.nodes] == [[1], [2], [3], []]
    conv = graph.nodes[0]
    assert conv.shapes == ((1, 4, 8, 8),) and conv.dtypes == ("float32",)
    assert conv.out_bytes == 4 * 8 * 8 * 4
    assert conv.flops == 4 * 8 * 8 * 3 * 3 * 3 * 2  # multiply-adds; the padding copy counts 0
    assert graph.nodes[3].is_block_output and not graph.nodes[0].is_block_output
    assert graph.nodes[3].classification.is_compound


def test_split_with_several_outputs():
    graph = build_graph(_legalize(foundation.SplitMultiOutput))
    kinds = {n.name: n.kind for n in graph.nodes}
    assert kinds["parts"] is NodeKind.CALL_TIR
    assert kinds["p0"] is NodeKind.TUPLE_GET_ITEM and kinds["p1"] is NodeKind.TUPLE_GET_ITEM
    parts = graph.nodes[graph.index_of("parts")]
    assert parts.shapes == ((4, 8), (4, 8)) and parts.out_bytes == 2 * 4 * 8 * 4
    assert graph.nodes[graph.index_of("p0")].pattern is OpPattern.INJECTIVE
    assert [graph.nodes[o].name for o in graph.nodes[graph.index_of("p0")].outputs] == ["s", "t"]


def test_concat_of_tuple_has_edges_from_every_field():
    graph = build_graph(_legalize(foundation.ConcatOfTuple))
    concat = graph.nodes[graph.index_of("c")]
    assert [graph.nodes[i].name for i in concat.inputs] == ["a", "b"]


def test_packed_call_is_opaque_and_not_fusible():
    graph = build_graph(_legalize(foundation.WithPackedCall))
    packed = graph.nodes[graph.index_of("p")]
    assert packed.kind is NodeKind.OTHER and not packed.fusible and packed.pattern is OpPattern.OPAQUE


def test_dominator_trees_on_a_diamond():
    graph = build_graph(_legalize(foundation.Diamond))
    e, left, right, j = (graph.index_of(n) for n in ("e", "left", "right", "j"))
    post = graph.post_dominators()
    assert post[e] == j and post[left] == j and post[right] == j and post[j] is None
    pre = graph.pre_dominators()
    assert pre[j] == e and pre[left] == e and pre[right] == e and pre[e] is None


def test_hand_built_graph_and_cycle_check():
    #   a -> b -> d ;  a -> c -> d  (diamond) plus d -> e
    graph = DataflowGraph.from_edges(
        {"a": "element-wise", "b": "reduction", "c": "element-wise", "d": "element-wise",
         "e": "matmul"},
        [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")], outputs=["e"])
    a, b, c, d, e = range(5)
    assert graph.merge_creates_cycle([a], [d])  # a->b->d leaves {a, d} and comes back
    assert not graph.merge_creates_cycle([a, b, c], [d])
    assert not graph.group_is_convex([a, b, d])  # a->c->d goes around it
    assert graph.group_is_convex([b, c, d])
    assert graph.reachable_from([b]) == {b, d, e}
    assert graph.post_dominators()[a] == d and graph.pre_dominators()[d] == a
    assert graph.nodes[e].pattern is OpPattern.OUT_EWISE_FUSABLE


def test_from_edges_rejects_edges_against_the_order():
    with pytest.raises(ValueError, match="against"):
        DataflowGraph.from_edges({"a": "opaque", "b": "opaque"}, [("b", "a")])


def test_symbolic_shapes_are_kept_out_of_static_facts():
    graph = build_graph(_legalize(foundation.SymbolicShape))
    assert all(n.shapes == () and n.out_bytes == 0 for n in graph.nodes)
    assert [n.ptype for n in graph.nodes] == [PrimitiveType.BROADCAST, PrimitiveType.ELEMENTWISE,
                                              PrimitiveType.ELEMENTWISE]


def test_non_relax_function_is_refused():
    mod = _legalize(foundation.Diamond)
    with pytest.raises(TypeError):
        build_graph(mod, "tir_exp")
    assert isinstance(mod["main"], relax.Function) and isinstance(mod["tir_exp"], tvm.tirx.PrimFunc)

"""APOLLO's algorithms on hand-built graphs (apollo-fusion.txt sections 3.3, 4.2, 4.3; Appendix A)."""

import itertools

import pytest

from tvm_fusion_ext.analysis.graph import DataflowGraph
from tvm_fusion_ext.hardware import HardwareSpec
from tvm_fusion_ext.partitioners.apollo import (
    MAX_BRANCHES,
    TABLE_1,
    ApolloPartitioner,
    LoopFacts,
    MicroGraphs,
    RooflineCostModel,
    aggregate,
    extract_subgraphs,
    gain,
    stitch_memory,
    stitch_parallel,
    without_rules,
)
from tvm_fusion_ext.partitioners.apollo.compound_ops import close_compound_ops, compound_instances
from tvm_fusion_ext.partitioners.apollo.rules import TABLE_2
from tvm_fusion_ext.tir_passes.reduction_forms import ReductionForm

SPEC = HardwareSpec("test", num_cores=4, vector_bytes=16, fast_memory_bytes=256 * 1024)
Y, X = ReductionForm.Y, ReductionForm.X


def names(graph, groups):
    return sorted(sorted(graph.nodes[n].name for n in g) for g in groups)


def fig3():
    """Fig. 3(a): two primitive ops, then LogSoftMax opened into a reduction and a subtraction."""
    return DataflowGraph.from_edges(
        {"op1": "element-wise", "op2": "element-wise", "op31": "reduction", "op32": "broadcast"},
        [("op1", "op2"), ("op2", "op31"), ("op2", "op32"), ("op31", "op32")], outputs=["op32"],
        out_bytes={"op1": 256, "op2": 256, "op31": 16, "op32": 256})  # 4 rows of 16 floats


FIG3_FACTS = {0: LoopFacts((4, 16)), 1: LoopFacts((4, 16)), 2: LoopFacts((4,), Y), 3: LoopFacts((4, 16))}


def test_fig3c_groups_and_example_2():
    graph = fig3()
    state = aggregate(MicroGraphs(graph))
    assert names(graph, state.partition()) == [["op1", "op2", "op31"], ["op32"]]
    # Example 2: the first group comes from rules 1 then 4; nothing aggregates a reduction with
    # a follow-up op in Table 1, so op32 stays alone.
    assert [m[0] for m in state.merges] == ["1", "4"]


def test_rules_fire_in_priority_order():
    graph = DataflowGraph.from_edges(
        {"b0": "broadcast", "r0": "reduction", "e0": "element-wise", "b1": "broadcast",
         "b2": "broadcast", "e1": "element-wise", "t": "transpose", "m": "matmul", "e2": "element-wise"},
        [("b0", "r0"), ("e0", "e1"), ("b1", "b2"), ("b2", "e1"), ("e1", "t"), ("t", "m"), ("m", "e2")],
        outputs=["r0", "e2"])
    state = aggregate(MicroGraphs(graph))
    fired = [m[0] for m in state.merges]
    level_of = {rule.name: i for i, level in enumerate(TABLE_1) for rule in level}
    assert fired == sorted(fired, key=level_of.get)  # levels in Algorithm 1's line-4 order
    assert fired == ["1", "2", "3", "5", "6-transpose", "6-matmul"]
    assert names(graph, state.partition()) == [
        ["b0", "r0"], ["b1", "b2", "e0", "e1", "t"], ["e2", "m"]]


def test_broadcast_into_element_wise_is_rule_2_before_rule_3():
    graph = DataflowGraph.from_edges({"b": "broadcast", "e": "element-wise", "c": "broadcast"},
                                     [("b", "e"), ("e", "c")], outputs=["c"])
    state = aggregate(MicroGraphs(graph))
    # rule 2 makes {b, e} a broadcast micro-graph, then rule 3 takes c in: recursion on the result type
    assert [m[0] for m in state.merges] == ["2", "3"]
    assert names(graph, state.partition()) == [["b", "c", "e"]]


def test_removed_rule_stops_its_merges():
    graph = fig3()
    state = aggregate(MicroGraphs(graph), without_rules(TABLE_1, "4"))
    assert names(graph, state.partition()) == [["op1", "op2"], ["op31"], ["op32"]]
    assert [m[0] for m in state.merges] == ["1"]
    matmul = DataflowGraph.from_edges({"m": "matmul", "e": "element-wise"}, [("m", "e")], outputs=["e"])
    assert names(matmul, aggregate(MicroGraphs(matmul)).partition()) == [["e", "m"]]
    no_mm = without_rules(TABLE_1, "6-matmul")
    assert names(matmul, aggregate(MicroGraphs(matmul), no_mm).partition()) == [["e"], ["m"]]


def test_reshaping_ops_take_the_type_of_the_micro_graph_they_join():
    # a reshape between two element-wise ops: the reshape rule makes {a, r} element-wise, then
    # rule 1 takes b in; a transpose after a reshape stays a transpose (6-transpose then takes
    # the broadcast producer)
    graph = DataflowGraph.from_edges(
        {"a": "element-wise", "r": "reshape", "b": "element-wise",
         "c": "broadcast", "r2": "reshape", "t": "transpose"},
        [("a", "r"), ("r", "b"), ("c", "r2"), ("r2", "t")], outputs=["b", "t"])
    state = aggregate(MicroGraphs(graph))
    assert names(graph, state.partition()) == [["a", "b", "r"], ["c", "r2", "t"]]
    assert [m[0] for m in state.merges] == ["reshape", "reshape", "1", "6-transpose"]
    state = aggregate(MicroGraphs(graph), without_rules(TABLE_1, "reshape"))
    assert names(graph, state.partition()) == [["a"], ["b"], ["c"], ["r"], ["r2"], ["t"]]


def test_data_movement_only_joins_its_consumers():
    # DenseNet: the concatenation of earlier features takes the batch norm and relu after it; the
    # micro-graph stays data movement, so it never becomes the epilogue of the conv that produced
    # a feature (6-conv-epilogue would take a broadcast micro-graph)
    graph = DataflowGraph.from_edges(
        {"x": "opaque", "c1": "conv", "cat": "data-movement", "bn": "broadcast", "relu": "element-wise",
         "c2": "conv"},
        [("x", "c1"), ("x", "cat"), ("c1", "cat"), ("cat", "bn"), ("bn", "relu"), ("relu", "c2")],
        outputs=["c2"])
    state = aggregate(MicroGraphs(graph))
    assert names(graph, state.partition()) == [["bn", "cat", "relu"], ["c1"], ["c2"], ["x"]]
    assert [m[0] for m in state.merges] == ["data-movement", "data-movement"]


def attention_head_split():
    """BERT's query projection: matmul, bias add, reshape to heads, transpose, identity copy,
    reshape for the batched matmul of the scores, which also reads the key path."""
    return DataflowGraph.from_edges(
        {"x": "opaque", "q": "matmul", "bias": "broadcast", "r1": "reshape", "t": "transpose",
         "copy": "element-wise", "r2": "reshape", "k": "opaque", "scores": "matmul",
         "scale": "element-wise"},
        [("x", "q"), ("q", "bias"), ("bias", "r1"), ("r1", "t"), ("t", "copy"), ("copy", "r2"),
         ("r2", "scores"), ("k", "scores"), ("scores", "scale")], outputs=["scale"])


def test_matmul_epilogue_takes_bias_reshape_and_transpose():
    graph = attention_head_split()
    state = aggregate(MicroGraphs(graph))
    # one kernel per matmul: the head split is the first matmul's epilogue, never the second's
    # prologue, and two matmuls never share a micro-graph
    assert names(graph, state.partition()) == [
        ["bias", "copy", "q", "r1", "r2", "t"], ["k"], ["scale", "scores"], ["x"]]
    assert {m[0] for m in state.merges} == {"reshape", "6-transpose", "6-matmul", "6-matmul-epilogue"}
    # without the epilogue rows, Table 1 as printed: the bias add is left out of the matmul
    state = aggregate(MicroGraphs(graph), without_rules(TABLE_1, "6-matmul-epilogue"))
    assert names(graph, state.partition()) == [
        ["bias", "r1", "t"], ["copy", "r2", "scale", "scores"], ["k"], ["q"], ["x"]]


def test_conv_epilogue_batch_norm_relu_and_residual():
    # ResNet's downsampling block: conv -> BN -> (+) <- BN <- conv (shortcut), then relu
    bn = ["sub", "div", "mul", "add"]
    types = {"x": "opaque", **{f"c{i}": "conv" for i in (1, 2)},
             **{f"{op}{i}": "broadcast" for i in (1, 2) for op in bn},
             "res": "element-wise", "relu": "element-wise"}
    edges = [("x", "c1"), ("x", "c2"), ("res", "relu")]
    for i in (1, 2):
        chain = [f"c{i}", *(f"{op}{i}" for op in bn), "res"]
        edges += list(itertools.pairwise(chain))
    graph = DataflowGraph.from_edges(types, edges, outputs=["relu"])
    groups = aggregate(MicroGraphs(graph)).partition()
    # rules 2 and 3 join both BN chains with the residual add and relu; one conv takes the lot
    # as its epilogue, the other (no conv + conv rule) stays alone: two kernels, as FuseOps
    assert len(groups) == 3
    convs = [sorted(graph.nodes[n].name for n in g if graph.nodes[n].name.startswith("c")) for g in groups]
    assert sorted(convs) == [[], ["c1"], ["c2"]]
    big = max(groups, key=len)
    assert {graph.nodes[n].name for n in big} >= {"res", "relu", "sub1", "sub2", "add1", "add2"}


def test_contractions_never_share_a_micro_graph_with_a_reduction():
    # matmul -> add -> sum: rule 4 (element-wise -> reduction) outranks 6-matmul
    graph = DataflowGraph.from_edges({"m": "matmul", "e": "element-wise", "r": "reduction"},
                                     [("m", "e"), ("e", "r")], outputs=["r"])
    assert names(graph, aggregate(MicroGraphs(graph)).partition()) == [["e", "r"], ["m"]]


def test_cycle_creating_merge_is_refused():
    # a -> b directly and a -> o -> b through an opaque op: fusing a and b would be a cycle
    graph = DataflowGraph.from_edges({"a": "element-wise", "o": "opaque", "b": "element-wise"},
                                     [("a", "o"), ("o", "b"), ("a", "b")], outputs=["b"])
    state = MicroGraphs(graph)
    assert state.creates_cycle((0, 2)) and not state.can_merge((0, 2))
    aggregate(state)
    assert names(graph, state.partition()) == [["a"], ["b"], ["o"]]


def test_feedback_forbids_a_pattern():
    graph = fig3()
    state = MicroGraphs(graph)
    full = state.pattern_of((0, 1, 2))
    state = aggregate(MicroGraphs(graph, forbidden=[full]))
    assert names(graph, state.partition()) == [["op1", "op2"], ["op31"], ["op32"]]


def test_subgraph_extraction_skips_ineligible_nodes():
    graph = DataflowGraph.from_edges({"a": "element-wise", "b": "element-wise", "c": "element-wise"},
                                     [("a", "b"), ("b", "c")], outputs=["c"])
    from tvm_fusion_ext.analysis.graph import NodeKind
    graph.nodes[1].kind = NodeKind.OTHER  # e.g. a call_dps_packed library call
    assert extract_subgraphs(graph) == [[0], [2]]
    assert names(graph, aggregate(MicroGraphs(graph)).partition()) == [["a"], ["b"], ["c"]]


# ---- Layer II: Algorithm 2 ----------------------------------------------------------------------
def test_memory_stitching_rule_7_on_fig3():
    graph = fig3()
    state = aggregate(MicroGraphs(graph))
    report = stitch_memory(state, FIG3_FACTS, SPEC)
    assert names(graph, state.partition()) == [["op1", "op2", "op31", "op32"]]
    assert [s[0] for s in report.stitched] == ["7"]
    # one row of op2's output (16 floats) and of op31's (1 float) fit the fast memory
    assert sorted(a.tile_bytes for a in report.allocations) == [4, 64]
    assert {(a.producer, a.memory) for a in report.allocations} == {(1, "local"), (2, "local")}


def test_memory_stitching_allocates_global_when_a_tile_does_not_fit():
    graph = fig3()
    state = aggregate(MicroGraphs(graph))
    tiny = HardwareSpec("tiny", num_cores=4, vector_bytes=16, fast_memory_bytes=2)
    report = stitch_memory(state, FIG3_FACTS, tiny)
    assert {a.memory for a in report.allocations} == {"global"}


def test_memory_stitching_needs_matching_loop_dimensions():
    graph = fig3()
    state = aggregate(MicroGraphs(graph))
    facts = dict(FIG3_FACTS)
    facts[3] = LoopFacts((16, 4))  # the consumer iterates other rows
    stitch_memory(state, facts, SPEC)
    assert names(graph, state.partition()) == [["op1", "op2", "op31"], ["op32"]]
    state = aggregate(MicroGraphs(graph))
    facts = dict(FIG3_FACTS)
    facts[2] = LoopFacts((), ReductionForm.ALL)  # an all-reduce has no rows to share
    stitch_memory(state, facts, SPEC)
    assert names(graph, state.partition()) == [["op1", "op2", "op31"], ["op32"]]


def two_reductions():
    return DataflowGraph.from_edges({"r1": "reduction", "e": "element-wise", "r2": "reduction"},
                                    [("r1", "e"), ("e", "r2")], outputs=["r2"])


def test_rule_8_stitches_reductions_of_one_canonical_form():
    graph = two_reductions()
    state = aggregate(MicroGraphs(graph), [])  # no Table 1: three micro-graphs
    facts = {0: LoopFacts((8,), Y), 1: LoopFacts((8,)), 2: LoopFacts((8,), Y)}
    report = stitch_memory(state, facts, SPEC)
    assert names(graph, state.partition()) == [["e", "r1", "r2"]]
    assert [s[0] for s in report.stitched] == ["7", "8"]


def test_rule_8_refuses_different_canonical_forms():
    graph = two_reductions()
    state = aggregate(MicroGraphs(graph), [])
    facts = {0: LoopFacts((8,), Y), 1: LoopFacts((8,)), 2: LoopFacts((8,), X)}
    report = stitch_memory(state, facts, SPEC)
    assert names(graph, state.partition()) == [["e", "r1"], ["r2"]]
    assert report.refused_form == [((0, 1), (2,))]
    # and without rule 8 in Table 2 nothing is even tried
    state = aggregate(MicroGraphs(graph), [])
    report = stitch_memory(state, {**facts, 2: LoopFacts((8,), Y)}, SPEC, [TABLE_2[0]])
    assert names(graph, state.partition()) == [["e", "r1"], ["r2"]]


# ---- Layer III: Algorithm 3 and Cost Model (3) --------------------------------------------------
class GivenCosts:
    """Example 7's costs: an op's cost alone, and 0.75 * k times that when k ops share the machine."""

    def __init__(self, graph, alone):
        self.graph, self.alone = graph, alone

    def cost(self, group, share):
        base = sum(self.alone.get(self.graph.nodes[n].name, 0.0) for n in group)
        return base if share == 1 else base * 0.75 * share

    def is_compute_bound(self, group):
        return False


def example7():
    ops = ["op1", "op2", "op3", "op4", "op5"]
    graph = DataflowGraph.from_edges({"head": "opaque", **{o: "element-wise" for o in ops}},
                                     [("head", o) for o in ops], outputs=ops)
    return graph, GivenCosts(graph, {"op3": 10.0, "op1": 8.0, "op5": 6.0, "op2": 3.0, "op4": 2.0})


def test_example_7_grouping():
    graph, model = example7()
    state = aggregate(MicroGraphs(graph))
    report = stitch_parallel(state, model)
    assert names(graph, state.partition()) == [["head"], ["op1", "op3", "op5"], ["op2", "op4"]]
    tried = [sorted(graph.nodes[n].name for op in ops for n in op) for ops, _ in report.rejected]
    # m=1, k=5 and k=4 are not profitable; {op3, op1, op5} is, then {op2, op4}
    assert tried[:2] == [["op1", "op2", "op3", "op4", "op5"], ["op1", "op2", "op3", "op5"]]
    assert [sorted(graph.nodes[n].name for op in ops for n in op) for ops in report.stitched] == [
        ["op1", "op3", "op5"], ["op2", "op4"]]


def test_gain_is_formula_3():
    graph, model = example7()
    ops = [frozenset({graph.index_of(o)}) for o in ("op3", "op1", "op5")]
    assert gain(model, ops) == pytest.approx(24.0 - 10.0 * 0.75 * 3)


def test_parallel_stitching_respects_dependences_and_the_branch_limit():
    # ten independent chains a_i -> b_i: at most MAX_BRANCHES per virtual tail, never a_i with b_i
    types, edges = {}, []
    for i in range(10):
        types[f"a{i}"] = "opaque"
        types[f"b{i}"] = "opaque"
        edges.append((f"a{i}", f"b{i}"))
    graph = DataflowGraph.from_edges(types, edges, outputs=[f"b{i}" for i in range(10)])
    model = GivenCosts(graph, {n: 1.0 for n in types})
    model.cost = lambda group, share: float(len(group)) if share == 1 else 0.5 * len(group)
    state = MicroGraphs(graph)
    report = stitch_parallel(state, model)
    assert report.stitched
    for group in state.partition():
        chains = [graph.nodes[n].name[1:] for n in group]
        assert len(chains) == len(set(chains))  # no chain contributes two dependent ops
        assert len(group) <= MAX_BRANCHES
    assert all(not state.creates_cycle([g]) for g in state.groups())


def test_compute_bound_ops_are_not_stitched():
    graph = DataflowGraph.from_edges({"h": "opaque", "m1": "matmul", "m2": "matmul"},
                                     [("h", "m1"), ("h", "m2")], outputs=["m1", "m2"])
    state = MicroGraphs(graph)
    stitch_parallel(state, RooflineCostModel(graph, SPEC))
    assert names(graph, state.partition()) == [["h"], ["m1"], ["m2"]]


def test_roofline_model_prefers_stitching_small_ops():
    graph = DataflowGraph.from_edges(
        {"h": "opaque", "s1": "element-wise", "s2": "element-wise", "big": "element-wise"},
        [("h", "s1"), ("h", "s2"), ("h", "big")], outputs=["s1", "s2", "big"],
        out_bytes={"s1": 256, "s2": 256, "big": 64 << 20})
    for name in ("s1", "s2", "big"):
        node = graph.nodes[graph.index_of(name)]
        elems = node.out_bytes // 4
        node.shapes = ((elems,),)
    model = RooflineCostModel(graph, SPEC)
    small = [frozenset({graph.index_of("s1")}), frozenset({graph.index_of("s2")})]
    assert gain(model, small) > 0  # one launch instead of two, nothing slowed down
    with_big = [frozenset({graph.index_of("big")}), small[0]]
    assert gain(model, with_big) <= 0  # halving the big op's bandwidth costs more than a launch
    state = MicroGraphs(graph)
    stitch_parallel(state, model)
    assert names(graph, state.partition()) == [["big"], ["h"], ["s1", "s2"]]


def test_partitioner_layers():
    graph = fig3()
    for layers, expected in [(("I",), [["op1", "op2", "op31"], ["op32"]]),
                             (("I", "II"), [["op1", "op2", "op31", "op32"]])]:
        part = ApolloPartitioner(SPEC, layers, facts=lambda g: FIG3_FACTS)
        assert names(graph, part(graph)) == expected
    with pytest.raises(ValueError):
        ApolloPartitioner(SPEC, ("II",))


# ---- closing compound ops that no group fused (after section 3.2's opening) --------------------
def _two_softmaxes():
    """matmul -> softmax (max, exp, sum, norm) -> softmax again -> add."""
    types = {"mm": "matmul", "max1": "reduction", "exp1": "element-wise", "sum1": "reduction",
             "norm1": "element-wise", "max2": "reduction", "exp2": "element-wise", "sum2": "reduction",
             "norm2": "element-wise", "add": "element-wise"}
    edges = [("mm", "max1"), ("mm", "exp1"), ("max1", "exp1"), ("exp1", "sum1"), ("exp1", "norm1"),
             ("sum1", "norm1"), ("norm1", "max2"), ("norm1", "exp2"), ("max2", "exp2"),
             ("exp2", "sum2"), ("exp2", "norm2"), ("sum2", "norm2"), ("norm2", "add")]
    graph = DataflowGraph.from_edges(types, edges, outputs=["add"])
    pieces = {graph.index_of(f"{step}{k}"): ("softmax", position)
              for k in (1, 2) for position, step in enumerate(("max", "exp", "sum", "norm"))}
    return graph, pieces


def test_compound_instances_keep_two_calls_of_one_op_apart():
    graph, pieces = _two_softmaxes()
    first = sorted(graph.index_of(f"{s}1") for s in ("max", "exp", "sum", "norm"))
    second = sorted(graph.index_of(f"{s}2") for s in ("max", "exp", "sum", "norm"))
    assert sorted(compound_instances(graph, pieces)) == [first, second]


def test_an_op_fused_with_nothing_else_is_closed_and_a_fused_one_is_not():
    graph, pieces = _two_softmaxes()
    n = graph.index_of
    # the first softmax: exp and sum in one group, max and norm alone; the second softmax's norm
    # is fused with the add after it
    groups = [[n("exp1"), n("sum1")], [n("norm2"), n("add")]]
    closed, count = close_compound_ops(graph, groups, pieces)
    assert count == 1
    assert sorted(map(sorted, closed)) == sorted([[n("max1"), n("exp1"), n("sum1"), n("norm1")],
                                                  [n("norm2"), n("add")]])
    # already one group, or fused with another op: nothing to do
    whole = [[n("max1"), n("exp1"), n("sum1"), n("norm1")], [n("norm2"), n("add")]]
    assert close_compound_ops(graph, whole, pieces) == (whole, 0)


def test_a_partly_fused_op_is_closed_only_where_the_judge_says_it_pays():
    graph, pieces = _two_softmaxes()
    n = graph.index_of
    # Layer I alone: the first softmax's max joins the matmul before it, the second softmax's
    # norm the add after it; their other pieces are kernels of their own
    groups = [[n("mm"), n("max1")], [n("exp1"), n("sum1")], [n("norm2"), n("add")]]
    assert close_compound_ops(graph, groups, pieces) == (groups, 0)  # no judge: as aggregation left it
    asked = []

    def judge(current, closed):
        asked.append((sorted(map(sorted, current)), sorted(map(sorted, closed))))
        return n("max1") in closed[0]  # close the first softmax only

    closed, count = close_compound_ops(graph, groups, pieces, closing_pays=judge)
    assert count == 1
    softmax1 = [n("max1"), n("exp1"), n("sum1"), n("norm1")]
    assert sorted(map(sorted, closed)) == sorted([[n("mm")], softmax1, [n("norm2"), n("add")]])
    assert asked[0] == (sorted([[n("mm"), n("max1")], [n("exp1"), n("sum1")], [n("norm1")]]),
                        sorted([softmax1, [n("mm")]]))
    assert asked[1] == (sorted([[n("max2")], [n("exp2")], [n("sum2")], [n("norm2"), n("add")]]),
                        sorted([[n("max2"), n("exp2"), n("sum2"), n("norm2")], [n("add")]]))
    # a closing that would make more kernels than it replaces is not made: the first softmax
    # closed would leave the matmul, itself and the second softmax with the add (three kernels
    # for two)
    groups = [[n("mm"), n("max1")],
              sorted([n(f"{s}{k}") for k in (1, 2) for s in ("exp", "sum", "norm")] + [n("max2"), n("add")])]
    assert close_compound_ops(graph, groups, pieces, closing_pays=lambda current, closed: True) == (groups, 0)

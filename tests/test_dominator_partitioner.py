"""Dominator partitioner on hand-built graphs: forward (FuseOps' rules), backward, both."""

import pytest

from tvm_fusion_ext.analysis.graph import DataflowGraph, NodeKind
from tvm_fusion_ext.partitioners.dominator import DominatorPartitioner, dominator_groups


def _groups(graph, direction, **kwargs):
    return [[graph.nodes[i].name for i in g] for g in dominator_groups(graph, direction, **kwargs)]


def _all(graph):
    return {d: _groups(graph, d) for d in ("forward", "backward", "both")}


def _kernels(graph, groups):
    grouped = {n for g in groups for n in g}
    return len(groups) + sum(1 for n in graph.nodes if n.name not in grouped)


def test_diamond_under_a_reduction():
    # r -> a -> j ; r -> b -> j   (r a reduction, a/b/j element-wise)
    graph = DataflowGraph.from_edges(
        {"r": "reduction", "a": "element-wise", "b": "element-wise", "j": "element-wise"},
        [("r", "a"), ("r", "b"), ("a", "j"), ("b", "j")], outputs=["j"])
    # Forward: a reduction never starts a fusion, the two branches join j.
    # Backward: j's pre-dominator is r; the branches are element-wise, r may take an epilogue.
    assert _all(graph) == {"forward": [["a", "b", "j"]], "backward": [["r", "a", "b", "j"]],
                           "both": [["r", "a", "b", "j"]]}


def test_multi_consumer_producer():
    # A reduction whose result two element-wise ops return: no post-dominator, one pre-dominator.
    graph = DataflowGraph.from_edges(
        {"p": "reduction", "a": "element-wise", "b": "element-wise"},
        [("p", "a"), ("p", "b")], outputs=["a", "b"])
    assert graph.post_dominators() == [None, None, None]
    assert graph.pre_dominators() == [None, 0, 0]
    assert _all(graph) == {"forward": [], "backward": [["p", "a", "b"]], "both": [["p", "a", "b"]]}


def _fig4():
    # tvm-backward-operator-fusion Fig. 4 as the text describes it: A is the immediate
    # pre-dominator of B, C, D and E (B and C both feed D and E).
    return DataflowGraph.from_edges(
        {"A": "element-wise", "B": "element-wise", "C": "broadcast", "D": "element-wise",
         "E": "element-wise"},
        [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("B", "E"), ("C", "E")],
        outputs=["D", "E"])


def test_paper_fig4_pre_dominator_tree_and_groups():
    graph = _fig4()
    assert graph.pre_dominators() == [None, 0, 0, 0, 0]
    assert graph.post_dominators() == [None, None, None, None, None]
    assert _all(graph) == {"forward": [], "backward": [["A", "B", "C", "D", "E"]],
                           "both": [["A", "B", "C", "D", "E"]]}


def test_max_depth_bounds_backward_groups():
    # E and D would bring A's group to 4 nodes; C then B still fit in 3.
    assert _groups(_fig4(), "backward", max_depth=3) == [["A", "B", "C"]]


def test_opt_level_zero_fuses_nothing():
    assert all(_groups(_fig4(), d, opt_level=0) == [] for d in ("forward", "backward", "both"))


def test_conv_prologue_backward_epilogue_forward():
    # x -> conv -> y: forward gives conv its epilogue, the mirrored backward rules its element-wise
    # prologue; backward's epilogue rule (section 7's "altering the fusing rules") and both, all.
    graph = DataflowGraph.from_edges({"x": "element-wise", "conv": "conv", "y": "element-wise"},
                                     [("x", "conv"), ("conv", "y")], outputs=["y"])
    groups = _all(graph)
    assert groups == {"forward": [["conv", "y"]], "backward": [["x", "conv", "y"]],
                      "both": [["x", "conv", "y"]]}
    assert _groups(graph, "backward", epilogues=False) == [["x", "conv"]]
    assert _kernels(graph, groups["both"]) < _kernels(graph, groups["forward"])


def test_backward_epilogue_rule_stops_where_forward_does():
    # conv -> bias (broadcast) -> relu -> transpose -> z: the epilogue is the element-wise and
    # broadcast ops after the conv; the transpose (injective) and z stay out of the conv's group.
    graph = DataflowGraph.from_edges(
        {"conv": "conv", "bias": "broadcast", "relu": "element-wise", "t": "transpose", "z": "element-wise"},
        [("conv", "bias"), ("bias", "relu"), ("relu", "t"), ("t", "z")], outputs=["z"])
    assert _groups(graph, "backward") == [["conv", "bias", "relu"], ["t", "z"]]
    # Without it, the transpose and z join the element-wise chain in phase 1.
    assert _groups(graph, "backward", epilogues=False) == [["bias", "relu", "t", "z"]]


def test_backward_gives_the_first_conv_the_ops_between_two_convs():
    # c1 -> bias -> relu6 -> c2 (a depthwise conv): the mirrored rules make relu6 (element-wise) c2's
    # prologue (recomputed at every window position); with epilogues bias and relu6 are c1's epilogue.
    graph = DataflowGraph.from_edges(
        {"c1": "conv", "bias": "broadcast", "relu6": "element-wise", "c2": "conv"},
        [("c1", "bias"), ("bias", "relu6"), ("relu6", "c2")], outputs=["c2"])
    assert _groups(graph, "backward") == [["c1", "bias", "relu6"]]
    assert _groups(graph, "backward", epilogues=False) == [["relu6", "c2"]]


def test_backward_gives_a_conv_its_silu():
    # conv -> add -> sigmoid -> mul(add, sigmoid) -> next conv: SiLU is the first conv's epilogue
    # (sigmoid through its pre-dominator add, then mul, which alone reads the group); the mirrored
    # rules alone leave mul to the next conv as a prologue.
    graph = DataflowGraph.from_edges(
        {"conv": "conv", "add": "broadcast", "sig": "element-wise", "mul": "element-wise", "next": "conv"},
        [("conv", "add"), ("add", "sig"), ("add", "mul"), ("sig", "mul"), ("mul", "next")], outputs=["next"])
    assert _groups(graph, "backward") == [["conv", "add", "sig", "mul"]]
    assert _groups(graph, "backward", epilogues=False) == [["add", "sig"], ["mul", "next"]]


def test_backward_gives_a_conv_its_residual_add():
    # p -> conv -> add <- p: add's pre-dominator is p, beyond the conv; the conv's result is read
    # by the add alone, so the add is its epilogue, as forward makes it.
    graph = DataflowGraph.from_edges(
        {"p": "reduction", "conv": "conv", "add": "element-wise"},
        [("p", "conv"), ("conv", "add"), ("p", "add")], outputs=["add"])
    assert graph.pre_dominators()[graph.index_of("add")] == graph.index_of("p")
    assert _groups(graph, "backward") == _groups(graph, "forward") == [["conv", "add"]]
    assert _groups(graph, "backward", epilogues=False) == []


def test_backward_joins_an_element_wise_op_to_the_producers_it_alone_reads():
    # An LSTM cell's f * c: f = sigmoid(gates) is read by the multiply alone, c comes from the
    # previous step and is read elsewhere too. The multiply has no pre-dominator; it post-dominates
    # the sigmoid, which forward fusion and backward's sole-reader rule give it.
    graph = DataflowGraph.from_edges(
        {"gates": "opaque", "c": "opaque", "f": "element-wise", "fc": "element-wise", "other": "opaque"},
        [("gates", "f"), ("f", "fc"), ("c", "fc"), ("c", "other")], outputs=["fc", "other"])
    assert graph.pre_dominators()[graph.index_of("fc")] is None
    assert _groups(graph, "backward") == _groups(graph, "forward") == [["f", "fc"]]
    assert _groups(graph, "backward", epilogues=False) == []
    # A producer with a second reader stays apart.
    graph = DataflowGraph.from_edges(
        {"gates": "opaque", "c": "opaque", "f": "element-wise", "fc": "element-wise", "other": "opaque"},
        [("gates", "f"), ("f", "fc"), ("c", "fc"), ("f", "other")], outputs=["fc", "other"])
    assert _groups(graph, "backward") == _groups(graph, "forward") == []


def test_backward_joins_an_upsampling_to_the_concatenation_that_alone_reads_it():
    # A U-Net's skip connection: enc (conv + relu) feeds the pooled bottleneck and the
    # concatenation, whose other input is the bottleneck's upsampling. The concatenation's
    # pre-dominator is enc's relu, past a conv; the upsampling's is the bottleneck's relu, in a
    # conv group once the epilogues are joined, which an injective op may not join. Forward
    # fuses the upsampling into the concatenation (its injective post-dominator); backward finds
    # that from the consumer's side.
    graph = DataflowGraph.from_edges(
        {"enc": "conv", "relu": "element-wise", "pool": "reduction", "mid": "conv",
         "relu2": "element-wise", "up": "data-movement", "cat": "data-movement", "dec": "conv"},
        [("enc", "relu"), ("relu", "pool"), ("pool", "mid"), ("mid", "relu2"), ("relu2", "up"),
         ("relu", "cat"), ("up", "cat"), ("cat", "dec")], outputs=["dec"])
    assert _groups(graph, "forward") == [["enc", "relu"], ["mid", "relu2"], ["up", "cat"]]
    assert _groups(graph, "backward") == _groups(graph, "forward")
    # The mirrored rules alone: relu2 is no conv's epilogue, and the upsampling joins it.
    assert _groups(graph, "backward", epilogues=False) == [["relu2", "up"]]
    # A second reader of the upsampling keeps it apart, in both directions (the element-wise
    # skip input, read by the concatenation alone, still joins it).
    graph = DataflowGraph.from_edges(
        {"mid": "conv", "up": "data-movement", "skip": "element-wise", "cat": "data-movement",
         "other": "opaque"},
        [("mid", "up"), ("up", "cat"), ("skip", "cat"), ("up", "other")], outputs=["cat", "other"])
    assert _groups(graph, "backward") == _groups(graph, "forward") == [["skip", "cat"]]


def test_forward_follows_fuse_ops_rules():
    # conv -> bias (broadcast) -> relu -> sum -> scale ; transpose -> relu
    graph = DataflowGraph.from_edges(
        {"t": "transpose", "conv": "conv", "bias": "element-wise", "relu": "element-wise",
         "sum": "reduction", "scale": "element-wise"},
        [("conv", "bias"), ("bias", "relu"), ("t", "relu"), ("relu", "sum"), ("sum", "scale")],
        outputs=["scale"])
    # Phase 0: the conv takes its element-wise epilogue (the group becomes kOutEWiseFusable), which
    # stops at the reduction (a conv group only joins element-wise post-dominators). Phase 1: the
    # injective transpose may not join a conv group. The reduction starts nothing.
    assert _groups(graph, "forward") == [["conv", "bias", "relu"]]
    # Backward, the reduction's element-wise epilogue joins it, and the bias joins the conv (its
    # pre-dominator); relu's pre-dominator is the virtual entry (it reads the transpose too), but
    # relu alone reads the conv group's result: it joins that group as its epilogue.
    assert _groups(graph, "backward") == [["conv", "bias", "relu"], ["sum", "scale"]]
    assert _groups(graph, "backward", epilogues=False) == [["sum", "scale"]]


def test_both_never_puts_two_complex_ops_together():
    # Forward fuses {c, e, y} (conv + epilogue, e joins the conv group as sink); backward would then
    # take e's pre-dominator r, a reduction, into the conv's group: refused.
    graph = DataflowGraph.from_edges(
        {"r": "reduction", "c": "conv", "e": "element-wise", "y": "element-wise"},
        [("r", "e"), ("c", "y"), ("e", "y")], outputs=["y"])
    assert _groups(graph, "forward") == [["c", "e", "y"]]
    assert _groups(graph, "both") == [["c", "e", "y"]]


def test_both_never_creates_a_cycle():
    # d -> n -> z and d -> w (opaque) -> z. Forward fuses {n, z}; backward would join n's
    # pre-dominator d to it, but the path d -> w -> z leaves that group and comes back.
    graph = DataflowGraph.from_edges(
        {"d": "element-wise", "n": "element-wise", "w": "opaque", "z": "element-wise"},
        [("d", "n"), ("n", "z"), ("d", "w"), ("w", "z")], outputs=["z"])
    assert _all(graph) == {"forward": [["n", "z"]], "backward": [["n", "z"]], "both": [["n", "z"]]}
    # The mirrored rules alone join n to its pre-dominator d (no cycle); with epilogues z, n's
    # sole reader, takes n first, and d then stays out: {d, n, z} would not be convex.
    assert _groups(graph, "backward", epilogues=False) == [["d", "n"]]
    for direction in ("forward", "backward", "both"):
        groups = dominator_groups(graph, direction)
        assert all(graph.group_is_convex(g) for g in groups)


def _split(edges, outputs):
    types = {"s": "transpose", "t0": "transpose", "t1": "transpose", "u": "element-wise", "v": "opaque"}
    graph = DataflowGraph.from_edges(types, edges, outputs=outputs)
    for item in ("t0", "t1"):
        graph.nodes[graph.index_of(item)].kind = NodeKind.TUPLE_GET_ITEM
    return graph


def test_a_tuple_stays_with_all_its_items():
    # s = split(..); t0 = s[0] -> u; t1 = s[1] -> v (opaque). Forward fuses {t0, u}; a group holding
    # s and only one of its items would return the tuple next to the item, which FuseTIR can't lower.
    # Backward, t0 joins its pre-dominator s and takes s's other item t1 along (the group returns
    # t1 to v): the split is no kernel of its own.
    graph = _split([("s", "t0"), ("s", "t1"), ("t0", "u"), ("t1", "v")], ["u", "v"])
    assert _all(graph) == {"forward": [["t0", "u"]], "backward": [["s", "t0", "t1", "u"]],
                           "both": [["s", "t0", "t1", "u"]]}
    # With both items in reach, the split and its items fuse either way.
    graph = _split([("s", "t0"), ("s", "t1"), ("t0", "u"), ("t1", "u")], ["u"])
    assert _all(graph) == {d: [["s", "t0", "t1", "u"]] for d in ("forward", "backward", "both")}


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError, match="sideways"):
        DominatorPartitioner("sideways")

"""GraphTurbo algorithms (graphturbo-dsa-scheduling.txt section 3, 4.3) on hand-built graphs."""

import math

import pytest
from tvm import relax, tirx

from tvm_fusion_ext.partitioners.graphturbo import (
    Split,
    Tensor,
    TurboGraph,
    TurboOp,
    allocate,
    best_split,
    bfs_order,
    build_instances,
    choose_order,
    dfs_order,
    group_subgraphs,
    infer_bindings,
    order_peak,
    peak_bytes,
    plain_binding,
    split_info,
)
from tvm_fusion_ext.partitioners.graphturbo.dim_maps import split_maps
from tvm_fusion_ext.partitioners.graphturbo.grouping import Grouping
from tvm_fusion_ext.partitioners.graphturbo.partitioner import (
    GraphTurboPartitioner,
    chain_split,
    chain_splits,
    chains,
    joinable,
    plan,
)
from tvm_fusion_ext.partitioners.graphturbo.split_info import recompute_ratio

F32 = 4


class _Builder:
    def __init__(self):
        self.ops: list[TurboOp] = []

    def add(self, name, shape, inputs=(), **kw):
        self.ops.append(TurboOp(name, tuple(shape), math.prod(shape) * F32, list(inputs),
                                flops=math.prod(shape), **kw))
        return len(self.ops) - 1

    def conv(self, name, shape, inp, k=1):
        window = {2: k - 1, 3: k - 1} if k > 1 else {}
        return self.add(name, shape, [inp], contracted=frozenset({1}), window=window)

    def graph(self):
        return TurboGraph(self.ops)


def _resnet50(batch=8, channels=64, image=64):
    """ResNet-50 as in section 1.2 / Fig. 2: four stages (3, 4, 6, 3 blocks); each stage's conv
    block turns [N, C, H, W] into [N, 2C, H/2, W/2] (S = 2); layers are conv + ReLU."""
    b = _Builder()
    x = b.add("input", (batch, channels, image, image), fusible=False)
    c, h = channels, image
    stages = []
    for s, blocks in enumerate((3, 4, 6, 3), start=1):
        first = len(b.ops)
        c2, h2 = 2 * c, h // 2
        # conv block: 3 layers on the main path, 1 on the shortcut, add, ReLU
        m = b.add(f"s{s}cb_relu1", (batch, c // 2, h2, h2), [b.conv(f"s{s}cb_conv1", (batch, c // 2, h2, h2), x)])
        m = b.add(f"s{s}cb_relu2", (batch, c // 2, h2, h2), [b.conv(f"s{s}cb_conv2", (batch, c // 2, h2, h2), m, 3)])
        m = b.conv(f"s{s}cb_conv3", (batch, c2, h2, h2), m)
        sc = b.conv(f"s{s}cb_short", (batch, c2, h2, h2), x)
        x = b.add(f"s{s}cb_out", (batch, c2, h2, h2), [b.add(f"s{s}cb_add", (batch, c2, h2, h2), [m, sc])])
        for k in range(blocks - 1):
            m = b.add(f"s{s}id{k}_relu1", (batch, c2 // 4, h2, h2), [b.conv(f"s{s}id{k}_conv1", (batch, c2 // 4, h2, h2), x)])
            m = b.add(f"s{s}id{k}_relu2", (batch, c2 // 4, h2, h2), [b.conv(f"s{s}id{k}_conv2", (batch, c2 // 4, h2, h2), m, 3)])
            m = b.conv(f"s{s}id{k}_conv3", (batch, c2, h2, h2), m)
            x = b.add(f"s{s}id{k}_out", (batch, c2, h2, h2), [b.add(f"s{s}id{k}_add", (batch, c2, h2, h2), [m, x])])
        stages.append(list(range(first, len(b.ops))))
        c, h = c2, h2
    b.ops[-1].is_output = True
    return b.graph(), stages


def test_split_info_hand_computed():
    # a -> b -> c, outputs [4, 6] float32 (96 bytes); peak = 96 + 96 = 192 bytes; LB = 64 bytes.
    b = _Builder()
    a = b.add("a", (4, 6))
    m = b.add("b", (4, 6), [a])
    b.add("c", (4, 6), [m])
    g = b.graph()
    assert peak_bytes(g, [0, 1, 2]) == 192
    info = split_info(g, [0, 1, 2], lb_bytes=64)
    # d=0 (extent 4): v in [1, 2, 4]; 192/4 = 48 <= 64 -> f=4. d=1 (extent 6): v in [1, 2, 4]
    # (8 > 6), f=4, but 6 % 4 != 0 so no intermediate is recorded for d=1.
    assert info == {Split(1, 1, 4, 0), Split(1, 2, 4, 0), Split(1, 3, 4, 0), Split(1, 1, 4, 1)}
    assert best_split(info) == Split(1, 3, 4, 0)
    # Eq. (1) priorities: more ops, then a smaller factor, then an outer dimension.
    assert best_split([Split(1, 2, 2, 0), Split(1, 3, 8, 1)]).dim == 1
    assert best_split([Split(1, 3, 2, 1), Split(1, 3, 8, 0)]).dim == 1
    assert best_split([Split(1, 3, 2, 1), Split(1, 3, 2, 0)]).dim == 0
    # nothing fits: no SplitInfo
    assert split_info(g, [0, 1, 2], lb_bytes=8) == set()


def test_recomputation_guard_drops_channel_split_of_two_convs():
    b = _Builder()
    x = b.add("x", (2, 16, 8, 8))
    y = b.conv("conv1", (2, 16, 8, 8), x)
    b.conv("conv2", (2, 16, 8, 8), y, k=3)
    g = b.graph()
    # splitting conv2's output channels makes every instance recompute conv1 entirely
    assert recompute_ratio(g, [1, 2], dim=1, factor=4) == pytest.approx((1 + 4) / 2)
    assert recompute_ratio(g, [1, 2], dim=0, factor=4) == pytest.approx(1.0)
    # a 3x3 halo of 2 rows on 8: each of 4 instances computes conv1 on 2 + 2 rows
    assert recompute_ratio(g, [1, 2], dim=2, factor=4) == pytest.approx((4 * 4 / 8 + 1) / 2)
    # batch extent 2 cannot give 4 pieces; 4 pieces along H or W recompute 1.5x: nothing left
    assert split_info(g, [1, 2], lb_bytes=peak_bytes(g, [1, 2]) // 4) == set()
    info = split_info(g, [1, 2], lb_bytes=peak_bytes(g, [1, 2]) // 2)
    assert {s.dim for s in info} == {0, 2, 3}  # the channel split (ratio 1.5) is refused


def test_grouping_resnet50_merges_blocks_and_stops_at_stages():
    g, stages = _resnet50()
    lb = -(-peak_bytes(g, stages[0]) // 8)
    grouping = group_subgraphs(g, lb)
    fused = [grp for grp in grouping.groups if g.ops[grp[0]].fusible]
    assert fused == stages  # Fig. 5: blocks merge; stages stop at down-sampling
    factors = [grouping.best[grouping.groups.index(s)].factor for s in stages]
    assert factors == [8, 4, 2, 1]  # Fig. 6
    assert all(grouping.best[grouping.groups.index(s)].dim == 0 for s in stages)
    assert grouping.merges["diamond"] > 0 and grouping.merges["straight"] > 0


def _fig6():
    g, stages = _resnet50()
    lb = -(-peak_bytes(g, stages[0]) // 8)
    grouping = group_subgraphs(g, lb)
    ig = build_instances(g, grouping, labels=["in", "a", "b", "c", "d"])
    return g, grouping, ig


def test_instances_and_redundant_edges_follow_fig6():
    _, _, ig = _fig6()
    names = [inst.name for inst in ig.instances if not inst.name.startswith("in")]
    assert names == [*[f"a{i}" for i in range(1, 9)], *[f"b{i}" for i in range(1, 5)],
                     "c1", "c2", "d1"]
    producers = {inst.name: sorted(ig.instances[p].name for p in inst.producers)
                 for inst in ig.instances}
    assert producers["b1"] == ["a1", "a2"] and producers["b4"] == ["a7", "a8"]
    assert producers["c2"] == ["b3", "b4"] and producers["d1"] == ["c1", "c2"]
    # a->b keeps 8 of 32 edges, b->c 4 of 8, c->d both
    assert ig.redundant_edges >= (32 - 8) + (8 - 4)


def test_bfs_and_dfs_orders_are_fig7():
    _, _, ig = _fig6()
    # drop the graph input's instances so the orders read like Fig. 7
    bfs = [n for n in ig.names(bfs_order(ig)) if not n.startswith("in")]
    dfs = [n for n in ig.names(dfs_order(ig)) if not n.startswith("in")]
    assert bfs == ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "b1", "b2", "b3", "b4", "c1", "c2", "d1"]  # Fig. 7(a)
    assert dfs == ["a8", "a7", "b4", "a6", "a5", "b3", "c2", "a4", "a3", "b2", "a2", "a1", "b1", "c1", "d1"]  # Fig. 7(f)
    kind, order = choose_order(ig)
    assert kind == "dfs" and order_peak(ig, order) < order_peak(ig, bfs_order(ig))


def test_plain_binding_factors():
    assert plain_binding((8, 64, 28, 28), cores=8) == (8, 1, 1, 1)
    assert plain_binding((2, 64, 28, 28), cores=8) == (2, 4, 1, 1)
    assert plain_binding((1, 6, 28, 28), cores=8) == (1, 2, 4, 1)
    assert plain_binding((8, 64), cores=8, unbindable=frozenset({0})) == (1, 8)


def test_algorithm4_sends_mismatched_producer_to_gb():
    # p feeds a (whose dim 0 cannot be bound) and b; both read p whole, same shape.
    shapes = {0: (8, 16), 1: (8, 16), 2: (8, 16)}
    producers = {1: [0], 2: [0]}
    result = infer_bindings([0, 1, 2], shapes, producers, cores=8, unbindable={1: frozenset({0})})
    assert result.bind[2] == (8, 1) and result.bind[1] == (1, 8)
    assert result.scope[0] == "GB" and result.scope[1] == result.scope[2] == "LB"
    # without the mismatch everything stays in LB
    agree = infer_bindings([0, 1, 2], shapes, producers, cores=8)
    assert set(agree.scope.values()) == {"LB"} and agree.bind[0] == (8, 1)


def test_algorithm4_on_fig7_order_keeps_stage_outputs_in_lb():
    _, _, ig = _fig6()
    order = dfs_order(ig)
    result = infer_bindings(order, {i: s.shape for i, s in enumerate(ig.instances)},
                            {i: s.producers for i, s in enumerate(ig.instances)}, cores=8)
    assert all(result.scope[i] == "LB" for i in order if not ig.instances[i].name.startswith("in"))


def test_liveness_spill_picks_longest_lived_tensor_fig12():
    # Fig. 12: out1 lives across seven cts; with room for three tensors, the fourth live one
    # forces a spill, and out1 goes although out2 is larger.
    tensors = [Tensor("in1", 10, 0, 1), Tensor("out1", 10, 0, 6), Tensor("out2", 30, 1, 3),
               Tensor("out3", 10, 2, 4), Tensor("out4", 10, 3, 5)]
    alloc = allocate(tensors, num_cts=7, lb_bytes=55, gb_bytes=1000)
    assert alloc.spills == [(3, "out1", "GB")]
    assert alloc.level == {"in1": "LB", "out1": "GB", "out2": "LB", "out3": "LB", "out4": "LB"}
    assert alloc.lb_peak <= 55
    # GB full as well: next level is DDR
    assert allocate(tensors, 7, lb_bytes=55, gb_bytes=5).level["out1"] == "DDR"


def test_grouping_refuses_unsplittable_and_non_fusible():
    b = _Builder()
    x = b.add("x", (4, 4))
    y = b.add("y", (4, 4), [x], fusible=False)
    b.add("z", (4, 4), [y])
    g = b.graph()
    assert group_subgraphs(g, lb_bytes=1 << 20).groups == [[0], [1], [2]]
    tiny = group_subgraphs(g, lb_bytes=1)  # nothing fits: no SplitInfo, no merge
    assert tiny.groups == [[0], [1], [2]] and tiny.best == [None, None, None]


def test_a_strided_conv_keeps_its_epilogue_whatever_its_split():
    """A conv whose input is 4x its output (stride 2): rule (i) alone would keep it apart from its
    bias and ReLU (f(conv) > f(bias): no large factor propagates past a down-sampling), but they
    are its layer (section 1.1), so they join it: on a DSA with or without SplitInfo, and with
    ``single_anchor`` (the CPU generator applies them in the conv's write-back). A transpose
    (another shape) does not join."""
    b = _Builder()
    x = b.add("x", (8, 64, 64, 64), fusible=False)
    conv = b.add("conv", (8, 64, 32, 32), [x], contracted=frozenset({1}), window={2: 2, 3: 2}, anchor=True)
    relu = b.add("relu", (8, 64, 32, 32), [b.add("bias", (8, 64, 32, 32), [conv])])
    b.add("transpose", (8, 32, 32, 64), [relu])
    b.ops[-1].is_output = True
    g = b.graph()
    assert best_split(split_info(g, [1], 1 << 19)).factor > best_split(split_info(g, [2], 1 << 19)).factor
    assert group_subgraphs(g, 1 << 19).groups == [[0], [1, 2, 3], [4]]
    assert group_subgraphs(g, 1 << 19, single_anchor=True).groups == [[0], [1, 2, 3], [4]]
    tiny = group_subgraphs(g, 1 << 10)  # no split fits: no SplitInfo anywhere
    assert tiny.groups == [[0], [1, 2, 3], [4]] and tiny.best == [None, None, None]


def test_a_residual_add_that_fits_lb_only_apart_from_its_block_still_joins_it():
    """A bottleneck block (two 1x1 convs, the second with its batchnorm) and the residual add after
    it: each has a split fitting LB (the block along the batch, the add along the channels), but
    their union has none (the add's two inputs and output, 3 KB, need more than 4 instances, and
    splitting the channels recomputes both convs in every instance), so rule (i) refuses the
    merge. The add and the ReLU after it are the last conv's layer (section 1.1) and join it;
    left apart they would each be a kernel taking the whole tensor DDR -> LB -> DDR."""
    b = _Builder()
    x = b.add("x", (4, 64, 1, 1), fusible=False)
    conv1 = b.add("conv1", (4, 16, 1, 1), [x], contracted=frozenset({1}), anchor=True)
    conv2 = b.add("conv2", (4, 64, 1, 1), [conv1], contracted=frozenset({1}), anchor=True)
    add = b.add("add", (4, 64, 1, 1), [b.add("bn", (4, 64, 1, 1), [conv2]), x])
    b.add("relu", (4, 64, 1, 1), [add])
    b.ops[-1].is_output = True
    g = b.graph()
    lb = 640
    assert best_split(split_info(g, [1, 2, 3], lb)) == Split(1, 3, 4, 0)
    assert best_split(split_info(g, [4], lb)) == Split(1, 1, 8, 1)
    assert split_info(g, [1, 2, 3, 4], lb) == set()
    grouping = group_subgraphs(g, lb)
    assert grouping.groups == [[0], [1, 2, 3, 4, 5]] and grouping.best[1] is None


def _inverted_residual():
    """An inverted residual block (expand 1x1, ReLU, 3x3 depthwise, ReLU, project 1x1), a pooling
    and a small classifier on [8, 16, 32, 32] images."""
    b = _Builder()
    x = b.add("x", (8, 16, 32, 32), fusible=False)
    expand = b.add("expand", (8, 64, 32, 32), [x], contracted=frozenset({1}), anchor=True)
    dw = b.add("dw", (8, 64, 32, 32), [b.add("relu", (8, 64, 32, 32), [expand])],
               window={2: 2, 3: 2}, anchor=True)
    project = b.add("project", (8, 16, 32, 32), [b.add("relu2", (8, 64, 32, 32), [dw])],
                    contracted=frozenset({1}), anchor=True)
    pool = b.add("pool", (8, 16, 1, 1), [project], contracted=frozenset({2, 3}), anchor=True)
    b.add("fc", (8, 4, 1, 1), [pool], contracted=frozenset({1}), anchor=True)
    b.ops[-1].is_output = True
    return b.graph()


def test_sgs_no_split_of_which_fits_lb_are_grouped_against_gb():
    """Section 3.6: where LB cannot hold a split of an SG, GB takes its place. An inverted
    residual block (expand 1x1, ReLU, 3x3 depthwise, ReLU, project 1x1) and a pooling, none of
    whose splits fits a 1 KB LB, keep only their layers' epilogues without a GB; against a 3 MB
    GB rules (i) and (ii) compare the splitting factors Algorithm 1 gives for GB: the expanded
    layers merge (factors 1, 2, 2, 2), the projection, whose factor (1) is below theirs, starts
    the next SG (rule (i)'s down-sampling guard), and the small classifier, whose split fits LB,
    merges with none of them."""
    g = _inverted_residual()
    alone = group_subgraphs(g, lb_bytes=1 << 10)
    assert alone.groups == [[0], [1, 2], [3, 4], [5], [6], [7]]
    gb = group_subgraphs(g, lb_bytes=1 << 10, gb_bytes=3 << 20)
    assert gb.groups == [[0], [1, 2, 3, 4], [5, 6], [7]]
    assert gb.best[:3] == [None, None, None] and gb.best[3] is not None  # LB splits only


def test_a_chain_of_sgs_grouped_against_gb_is_one_kernel_of_one_planned_instance():
    """The two SGs grouped against GB above form a straight chain whose GB splits line up along
    the images, so they run as one kernel (Fig. 3(b)'s depth-first order, its instances sized for
    GB, section 3.6); the classifier after them, whose split fits LB, joins the chain too and
    runs at its instances (they fit GB as well). The plan keeps the classifier's one instance
    (the kernel generator picks the instance count). Without a GB the SGs have nothing to chain
    by."""
    g = _inverted_residual()
    grouping = group_subgraphs(g, lb_bytes=1 << 10, gb_bytes=3 << 20)
    assert chains(g, grouping) == [[0], [1, 2, 3]]
    assert chain_splits(g, grouping, [[0], [1, 2, 3]]) == grouping.best
    names = [op.name for op in g.ops]
    block = plan(g, grouping, 8, names, chain=True)
    assert block.chains == [[0], [1, 2, 3]]
    kernel = block.kernels[tuple(names[1:8])]
    assert (kernel.instances, kernel.output_shape) == (1, (8, 4, 1, 1))
    assert chains(g, group_subgraphs(g, lb_bytes=1 << 10)) == [[sg] for sg in range(6)]


def _project_then_expand():
    """A projection (1x1 conv) feeding the next block's expansion, ReLU and depthwise conv, with
    LB splits along the channels (the expansion contracts the projection's channels, so no
    channel slice of one needs only a slice of the other) and GB splits along the images."""
    b = _Builder()
    x = b.add("x", (8, 16, 32, 32), fusible=False)
    project = b.conv("project", (8, 16, 32, 32), x)
    relu = b.add("relu", (8, 64, 32, 32), [b.conv("expand", (8, 64, 32, 32), project)])
    b.add("dw", (8, 64, 32, 32), [relu], window={2: 2, 3: 2}, anchor=True)
    b.ops[-1].is_output = True
    grouping = Grouping([[0], [1], [2, 3, 4]], [None, Split(1, 1, 2, 1), Split(1, 1, 8, 1)], {},
                        [None, Split(1, 1, 2, 0), Split(1, 1, 4, 0)])
    return b.graph(), grouping


def test_a_chain_through_gb_falls_back_to_the_images_when_its_last_split_recomputes():
    """A GB-sized SG (a projection, then the next block's expansion and ReLU; section 3.6) feeding
    a depthwise conv whose LB split runs along the channels: along the channels every instance
    would need the whole projection (its output channels are contracted by the expansion), so
    the chain is split along the images instead, as many instances as the larger factor."""
    g, _ = _project_then_expand()
    grouping = Grouping([[0], [1, 2, 3], [4]], [None, None, Split(1, 1, 8, 1)], {},
                        [None, Split(1, 1, 4, 0), None])
    assert chain_split(g, grouping, [1, 2]) == {1: Split(1, 1, 8, 0), 2: Split(1, 1, 8, 0)}
    lb_only = Grouping(grouping.groups, [None, Split(1, 1, 4, 0), Split(1, 1, 8, 1)], {}, [])
    assert chain_split(g, lb_only, [1, 2]) is None  # an LB chain keeps its last SG's dimension


def test_cpu_grouping_keeps_computing_ops_out_of_a_matmuls_prologue():
    """An LSTM cell's ``h = o * tanh(c)`` feeds the next step's matmul alone: a straight merge.
    The CPU kernel generator (``single_anchor``) would inline the multiply into the matmul's
    micro-kernel, once per column tile, so with the profitability check (``accept``, which
    accepts everything here) it stays apart; a reshape (data movement only) still joins, and the
    paper's rules (no check) merge both."""
    def everything(_parts):
        return True

    for computes, cpu_groups in ((True, [[0], [1], [2], [3, 4]]), (False, [[0], [1], [2, 3, 4]])):
        b = _Builder()
        o = b.add("o", (4, 128), fusible=False)
        c = b.add("c", (4, 128), fusible=False)
        h = b.add("h", (4, 128), [o, c], computes=computes)
        matmul = b.add("matmul", (4, 512), [h], contracted=frozenset({1}), anchor=True, contraction=True)
        b.add("bias", (4, 512), [matmul])
        b.ops[-1].is_output = True
        g = b.graph()
        assert group_subgraphs(g, 1 << 19, single_anchor=True, accept=everything).groups == cpu_groups
        assert group_subgraphs(g, 1 << 19, single_anchor=True).groups == [[0], [1], [2, 3, 4]]


def test_chains_run_the_four_stages_as_one_kernel_in_dfs_order():
    """Fig. 6's instances line up slice for slice along the batch (b1 needs a1, a2 only), so the
    DFS order of Fig. 7(f) can run the four stage sub-graphs as one kernel; the graph input
    (not fusible) starts a chain of its own."""
    g, grouping, _ = _fig6()
    stage_sgs = [i for i, grp in enumerate(grouping.groups) if g.ops[grp[0]].fusible]
    assert chains(g, grouping) == [[0], stage_sgs]
    # a halo along the split dimension breaks the alignment: split the stages along H instead;
    # even stage 4 (one instance) stays alone, since with stage 3 the kernel would run stage 3's
    # two instances along H, whose 3x3 windows need a halo
    along_h = Grouping(grouping.groups, [None if s is None else Split(s.split, s.n, s.factor, 2)
                                         for s in grouping.best])
    assert chains(g, along_h) == [[0], *([sg] for sg in stage_sgs)]


def test_a_chain_resplits_a_producer_along_the_chain_dimension():
    """BERT's FFN: the up-projection's BestSplit is along its columns, the down-projection's along
    the tokens. One kernel over token slices needs token slice j of the up-projection only, so the
    chain splits it along the tokens too, into the larger factor's instances; the instances then
    pair one to one and the depth-first order wins."""
    b = _Builder()
    x = b.add("x", (64, 16), fusible=False)
    up = b.add("up", (64, 64), [x], contracted=frozenset({1}))
    b.add("down", (64, 16), [up], contracted=frozenset({1}))
    g = b.graph()
    grouping = Grouping([[0], [1], [2]], [None, Split(1, 1, 4, 1), Split(1, 1, 2, 0)])
    assert chains(g, grouping) == [[0], [1, 2]]
    splits = chain_splits(g, grouping, [[0], [1, 2]])
    assert splits == [None, Split(1, 1, 4, 0), Split(1, 1, 4, 0)]
    ig = build_instances(g, grouping, splits=splits)
    down = [inst for inst in ig.instances if inst.sg == 2]
    assert [ig.instances[p].name for inst in down for p in inst.producers] == [
        "sg1_1", "sg1_2", "sg1_3", "sg1_4"]
    assert choose_order(ig)[0] == "dfs" and choose_order(build_instances(g, grouping))[0] == "bfs"


def test_split_maps_follow_reshape_transpose_and_reduction():
    """Algorithm 1's match_dim through ops whose shape alone does not tell: a reshape carries a
    batch split to the merged dimension, a transpose to the permuted one, a softmax row is whole."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(relax.op.reshape(x, (32, 6)))
            t = bb.emit(relax.op.permute_dims(x, [0, 2, 1]))
            s = bb.emit(relax.op.nn.softmax(x, axis=-1))
            bb.emit_output(relax.Tuple([r, t, s]))
        bb.emit_func_output(x)
    mod = relax.transform.LegalizeOps()(bb.get())
    funcs = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    assert split_maps(funcs["reshape"], 1) == [{0: (0, 0), 1: (2, 0)}]  # rows -> batch of x
    assert split_maps(funcs["transpose"], 1) == [{0: (0, 0), 1: (2, 0), 2: (1, 0)}]
    assert split_maps(funcs["softmax"], 1) == [{0: (0, 0), 1: (1, 0)}]  # not along the row


def test_split_maps_of_a_data_dependent_index_read_the_whole_input():
    """A gather whose index is itself a tensor element (ViT's class token, ``x[:, 0]`` with a 0-d
    index) has no static bound: the whole indexed dimension is needed, and nothing crashes."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 5, 8), "float32"))
    index = relax.Var("index", relax.TensorType((), "int64"))
    with bb.function("main", [x, index]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.take(x, index, axis=1)))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    take = next(f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc))
    maps = split_maps(take, 2)
    # output rows follow x's rows, output columns x's last dimension; x's gathered dimension
    # (read whole, its index unknown) maps to no output dimension
    assert maps[0] == {0: (0, 0), 1: (2, 0)}


def test_redundant_edges_are_found_through_a_reshape():
    """Algorithm 3 needs the redundant edges gone: a consumer that reshapes 32 token rows into 8
    sentences of 4 needs, per sentence slice, only the token slices it covers - although the two
    outputs differ in extent along the split dimension."""
    b = _Builder()
    tokens = b.add("tokens", (32, 4))
    b.add("sentences", (8, 16), [tokens], split_maps={tokens: {0: (0, 0), 1: None}})
    g = b.graph()
    grouping = Grouping([[0], [1]], [Split(1, 1, 8, 0), Split(1, 1, 4, 0)])
    ig = build_instances(g, grouping)
    producers = [[ig.instances[p].name for p in inst.producers] for inst in ig.instances if inst.sg == 1]
    assert producers == [["sg0_1", "sg0_2"], ["sg0_3", "sg0_4"], ["sg0_5", "sg0_6"], ["sg0_7", "sg0_8"]]
    assert ig.redundant_edges == 32 - 8


def test_two_sgs_joined_through_gb_chain_along_their_gb_splits():
    """Section 3.6: two SGs whose LB splits do not line up chain when joined through GB, split
    along the images by their GB splits (the larger factor); the kernel generator picks the
    instance count, so the plan keeps their own splits."""
    g, grouping = _project_then_expand()
    assert joinable(g, grouping, [[0], [1], [2]]) == [(0, 1), (1, 2)]
    assert chains(g, grouping) == [[0], [1], [2]]
    assert chain_split(g, grouping, [1, 2]) is None
    assert chain_split(g, grouping, [1, 2], through_gb=True) == {1: Split(1, 1, 4, 0), 2: Split(1, 1, 4, 0)}
    assert chains(g, grouping, joined={(1, 2)}) == [[0], [1, 2]]
    assert chain_splits(g, grouping, [[0], [1, 2]], {(1, 2)}) == grouping.best
    names = [op.name for op in g.ops]
    block = plan(g, grouping, 8, names, chain=True, joined={(1, 2)})
    assert block.chains == [[0], [1, 2]]
    assert tuple(names[1:5]) in block.kernels


def test_joining_two_sgs_through_gb_leaves_an_lb_link_before_them_to_the_order():
    """A scaling op LB-chains with the projection after it (both split along the images), and the
    projection is joined through GB with the expansion, ReLU and depthwise conv (section 3.6).
    ``chains`` makes one chain of the three; under the breadth-first order (Algorithm 3 loses on
    the LB peak here) the plan keeps only the joined pair as one kernel, so a join trial prices
    the join it names and not the LB link before it."""
    b = _Builder()
    x = b.add("x", (8, 16, 32, 32), fusible=False)
    project = b.conv("project", (8, 16, 32, 32), b.add("scale", (8, 16, 32, 32), [x]))
    relu = b.add("relu", (8, 64, 32, 32), [b.conv("expand", (8, 64, 32, 32), project)])
    b.add("dw", (8, 64, 32, 32), [relu], window={2: 2, 3: 2}, anchor=True)
    b.ops[-1].is_output = True
    g = b.graph()
    grouping = Grouping([[0], [1], [2], [3, 4, 5]],
                        [None, Split(1, 1, 2, 0), Split(1, 1, 2, 0), Split(1, 1, 8, 1)], {},
                        [None, Split(1, 1, 2, 0), Split(1, 1, 2, 0), Split(1, 1, 4, 0)])
    assert chains(g, grouping) == [[0], [1, 2], [3]]
    assert chains(g, grouping, joined={(2, 3)}) == [[0], [1, 2, 3]]
    names = [op.name for op in g.ops]
    assert plan(g, grouping, 8, names, chain=True).chains == [[0], [1], [2], [3]]
    block = plan(g, grouping, 8, names, chain=True, joined={(2, 3)})
    assert block.order_kind == "bfs"
    assert block.chains == [[0], [1], [2, 3]]
    assert tuple(names[2:6]) in block.kernels


def test_the_judge_joins_two_kernels_through_gb_only_where_the_joined_one_is_faster():
    """:meth:`GraphTurboPartitioner.judge` with a cost of 10 cycles per kernel launch plus one per
    op joins the projection's kernel and the expansion's (14 < 11 + 13 cycles) and keeps the
    joined kernel; at a cost that grows with the kernel's size it leaves them apart."""
    g, grouping = _project_then_expand()
    names = [op.name for op in g.ops]
    for cost, expected in ((lambda ops: 10 + len(ops), [[0], [1, 2]]),
                           (lambda ops: len(ops) ** 2, [[0], [1], [2]])):
        partitioner = GraphTurboPartitioner(1 << 10, 8, chain=True, kernel_cost=(
            lambda graph, requests, cost=cost: [cost(ops) for ops, _ in requests]))
        block = plan(g, grouping, 8, names, chain=True)
        assert block.chains == [[0], [1], [2]]
        assert partitioner.judge(None, block, names).chains == expected


def _two_residual_blocks():
    """Two residual blocks (ResNet's bottleneck, Fig. 2, cut to one conv per path): each a conv
    SG and a conv + add SG that adds the block's input; LB splits along the channels (the convs
    contract them, so no two SGs chain in LB) and GB splits along the images."""
    b = _Builder()
    x = b.add("x", (8, 16, 32, 32), fusible=False)
    for k in range(2):
        inner = b.conv(f"conv1_{k}", (8, 16, 32, 32), x)
        x = b.add(f"add_{k}", (8, 16, 32, 32), [b.conv(f"conv2_{k}", (8, 16, 32, 32), inner), x])
    b.ops[-1].is_output = True
    lb, gb = Split(1, 1, 2, 1), Split(1, 1, 2, 0)
    grouping = Grouping([[0], [1], [2, 3], [4], [5, 6]], [None, lb, lb, lb, lb], {},
                        [None, gb, gb, gb, gb])
    return b.graph(), grouping


def test_residual_blocks_join_through_gb_into_one_kernel_with_one_output():
    """Section 3.6 across residuals: a block's two SGs join (the first feeds only the second),
    then the two blocks (the first block's output feeds both SGs of the second, so the pair of
    blocks has one output although no SG pair is linked one to one). A join that would leave an
    SG's output read outside the kernel is not made."""
    g, grouping = _two_residual_blocks()
    singles = [[0], [1], [2], [3], [4]]
    # the input (SG 0, not fusible) is a candidate too: replanning refuses it (no chain_split)
    assert joinable(g, grouping, singles) == [(1, 2), (3, 4)]
    assert joinable(g, grouping, [[0], [1, 2], [3, 4]]) == [(0, 1), (2, 3)]
    assert chains(g, grouping, joined={(0, 1), (1, 2)}) == [[0], [1, 2], [3], [4]]
    assert chains(g, grouping, joined={(2, 3)}) == singles  # the add's output is read by SG 4 too
    assert chains(g, grouping, joined={(1, 2), (3, 4)}) == [[0], [1, 2], [3, 4]]
    # the join between the blocks is listed first, but needs the joins inside them made before it
    assert chains(g, grouping, joined={(1, 2), (2, 3), (3, 4)}) == [[0], [1, 2, 3, 4]]


def test_the_judge_joins_residual_blocks_where_the_joined_kernel_is_faster():
    """:meth:`GraphTurboPartitioner.judge` at 10 cycles per kernel launch plus one per op joins
    each block's SGs, then the two blocks; at a cost growing with the kernel's size it joins
    nothing."""
    g, grouping = _two_residual_blocks()
    names = [op.name for op in g.ops]
    for cost, expected in ((lambda ops: 10 + len(ops), [[0], [1, 2, 3, 4]]),
                           (lambda ops: len(ops) ** 2, [[0], [1], [2], [3], [4]])):
        partitioner = GraphTurboPartitioner(1 << 10, 8, chain=True, kernel_cost=(
            lambda graph, requests, cost=cost: [cost(ops) for ops, _ in requests]))
        block = plan(g, grouping, 8, names, chain=True)
        assert block.chains == [[0], [1], [2], [3], [4]]
        assert partitioner.judge(None, block, names).chains == expected


def test_an_sg_holding_an_output_of_the_block_ends_its_kernel():
    """An SG whose result is also read after the block (a block output) cannot sit inside a joined
    kernel: the kernel has one output, so the first block stays apart from the second."""
    g, grouping = _two_residual_blocks()
    g.ops[3].is_output = True  # the first block's add
    assert joinable(g, grouping, [[0], [1, 2], [3, 4]]) == [(0, 1)]
    assert chains(g, grouping, joined={(1, 2), (2, 3), (3, 4)}) == [[0], [1, 2], [3, 4]]

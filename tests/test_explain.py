"""``tvm-fusion explain``: the partition read back from every strategy, its table, SVG and DOT.

The full check (ResNet-18 at 224x224 and BERT with 2 layers, every strategy) is
``scripts/explain_all.py``; here BERT (1 small layer) goes through every strategy and ResNet-18
(32x32) through three that share its pre-processing.
"""

import xml.etree.ElementTree as ET

import pytest
import tvm
from cases import foundation
from tvm import relax

import tvm_fusion_ext
from tvm_fusion_ext import zoo
from tvm_fusion_ext.analysis.graph import NodeKind
from tvm_fusion_ext.cli import main
from tvm_fusion_ext.explain import explain, prefusion
from tvm_fusion_ext.explain.check import check_report
from tvm_fusion_ext.explain.groups import report_partition
from tvm_fusion_ext.explain.inline import inline_groups
from tvm_fusion_ext.explain.render_svg import SVG_NS
from tvm_fusion_ext.explain.style import instance_label
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.relax_passes.graphturbo_fusion import GraphTurboFusion
from tvm_fusion_ext.relax_passes.materialize_partition import MaterializePartition, group_by_names
from tvm_fusion_ext.testing import verify

pytestmark = pytest.mark.zoo
LLVM = tvm.target.Target("llvm")


def _legalized(mod):
    with LLVM:
        return tvm.transform.Sequential(preprocess_passes())(mod)


def test_table_of_a_hand_chosen_multi_output_group():
    """relu -> split -> (p0, p1) -> add in one kernel that also exports p0; multiply alone."""
    before = _legalized(foundation.SplitMultiOutput)
    fused = MaterializePartition(group_by_names(["r", "parts", "p0", "p1", "s"]))(before)
    report = report_partition(before, fused, "hand", "llvm", "SplitMultiOutput")
    check_report(report)
    first, second = report.rows()
    assert first["group"] == "fused_relu_split_add" and second["group"] == "multiply"
    assert first["ops"] == ["relu", "split", "get-item", "get-item", "add"]
    assert first["apollo_types"].startswith("element-wise") and second["ops"] == ["multiply"]
    # Unfused: relu 256+256, split 256+256, add 128+128+128. Fused: x in (256), s and p0 out (128 each).
    assert report.groups[0].boundary_bytes == 512
    assert first["kept_bytes"] == 1408 - 512 and second["kept_bytes"] == 0
    table = report.table()
    assert "fused_relu_split_add" in table and "896 B" in table and "2 kernels (1 fused)" in table


INLINE_CASES = {
    "multi-output": (foundation.SplitMultiOutput, ["r", "parts", "p0", "p1", "s"]),
    "constants": (foundation.WithConstants, ["a", "b", "c"]),
    "tuple": (foundation.ConcatOfTuple, ["a", "b", "c", "d"]),
    "in-place": (foundation.WithInplaceCall, ["e", "s", "r"]),
    "stock": (foundation.ConvBiasReluSoftmax, None),  # TVM's own FuseOps groups it
    "stock-split": (foundation.SplitMultiOutput, None),
}


@pytest.mark.parametrize("case", INLINE_CASES)
def test_inlined_groups_compute_what_the_module_computes(case):
    """Putting every group back into main gives a well-formed module with the same results."""
    mod, group = INLINE_CASES[case]
    before = _legalized(mod)
    grouping = MaterializePartition(group_by_names(group)) if group else relax.transform.FuseOps()
    fused = grouping(before)
    flat, calls = inline_groups(fused)
    assert relax.analysis.check_well_formed(flat)
    assert calls and (group is None or [len(c.variables) for c in calls] == [len(group)])
    assert not any(isinstance(f, relax.Function) and f.attrs and f.attrs.get("Primitive")
                   for _, f in flat.functions_items())
    check_report(report_partition(before, fused, case, "llvm"))
    inputs = verify.random_inputs(mod["main"], seed=1)
    expected = verify.run(verify.build(mod, "none"), inputs)
    verify.assert_allclose_by_dtype(verify.run(verify.build(flat, "none"), inputs), expected)


@pytest.fixture(scope="module")
def bert():
    mod = zoo.load("bert_base", zoo.parse_model_args(
        "bert_base", ["layers=1", "seq=16", "hidden=32", "heads=2", "intermediate=64"])).relax("torch")
    return mod, prefusion(mod, "none", LLVM)


@pytest.mark.parametrize("fusion", tvm_fusion_ext.fusion_names())
def test_bert_drawing_under_every_strategy(bert, fusion):
    mod, base = bert
    report = explain(mod, fusion, "llvm", "bert_base", base=base)
    check_report(report)
    if fusion.startswith("apollo") or fusion == "neoflow":  # every merge is recorded
        for block in report.blocks:
            for g in block.groups:
                kernels = sum(block.graph.nodes[m].kind is NodeKind.CALL_TIR for m in g.members)
                assert kernels == 1 or g.rule, g.name


@pytest.fixture(scope="module")
def resnet18():
    mod = zoo.load("resnet18", {**zoo.MODELS["resnet18"].defaults, "image": 32}).relax("torch")
    return mod, prefusion(mod, "none", LLVM)


@pytest.mark.parametrize("fusion", ["stock", "dominator-backward", "graphturbo"])
def test_resnet18_drawing(resnet18, fusion):
    mod, base = resnet18
    report = explain(mod, fusion, "llvm", "resnet18", base=base)
    check_report(report)
    ops = sum(n.kind is NodeKind.CALL_TIR for b in report.blocks for n in b.graph.nodes)
    assert any(g.fused for g in report.groups) and report.kernels < ops


def test_graphturbo_instances_and_their_order():
    """With a 1 KiB local buffer GraphTurbo splits sub-graphs into instances; every instance has
    one position of the chosen order, given by each box (its subtitle, in full in its tooltip)."""
    mod = zoo.load("resnet_stage", {"image": 8, "channels": 8}).relax("torch")
    before = _legalized(mod)
    fusion = GraphTurboFusion(lb_bytes=1024, cores=8)
    with LLVM:
        fused = fusion(before)
    report = report_partition(before, fused, "graphturbo", "llvm", "resnet_stage", [fusion])
    svg, _ = check_report(report)
    positions = sorted(p for g in report.groups for p in g.instances)
    assert positions == list(range(1, len(fusion.plans[0].instances.instances) + 1))
    assert any(g.fused and len(g.instances) > 1 for g in report.groups)
    assert any("instance order" in note for note in report.notes)
    boxes = {g.get("id"): g.find(f"{{{SVG_NS}}}title").text for g in ET.fromstring(svg).iter(f"{{{SVG_NS}}}g")
             if "kernel" in g.get("class", "").split()}
    assert all(instance_label(g) in boxes[f"kernel-{g.kernel}"].splitlines() for g in report.groups)


def test_cli_writes_svg_dot_and_prints_the_table(tmp_path, capsys):
    svg, dot = tmp_path / "g.svg", tmp_path / "g.dot"
    code = main(["explain", "apollo_fig3", "--model-arg", "batch=4", "--model-arg", "features=64",
                 "--fusion", "stock", "--out", str(svg), "--dot", str(dot)])
    assert code == 0
    out = capsys.readouterr().out
    assert "kept on chip" in out and "fused_" in out
    root = ET.parse(svg).getroot()
    assert root.tag == f"{{{SVG_NS}}}svg" and "apollo_fig3" in ET.tostring(root, encoding="unicode")
    assert dot.read_text().startswith("digraph") and "subgraph cluster_" in dot.read_text()


@pytest.mark.parametrize("args, message", [
    (["--fusion", "nope"], "unknown fusion strategy 'nope'"),
    (["--fusion", "stock", "--target", "nonsense-target"], "bad target"),
    (["--fusion", "stock", "--out", "/no/such/dir/g.svg"], "no such directory"),
])
def test_cli_mistakes_are_one_line(tmp_path, capsys, args, message):
    argv = ["explain", "apollo_fig3", "--out", str(tmp_path / "g.svg"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err

"""CPUAttention (``tvm_fusion_ext/tir_passes/cpu_attention.py``): the loop nest written from a match
computes what the matched function computes (layout variants, a scale, query and key counts that
fill no block, ViT-Ti's 197 tokens); near-misses and other targets are declined; BERT's attention,
which NeoFlow groups whole on the CPU (``cost/attention_groups.py``), becomes one kernel with no
buffer of heads x seq x seq scores, and the compiled model equals the unfused one."""

import functools

import numpy as np
import pytest
import tvm
import tvm_ffi
from cases.attention import NEAR_MISSES, VARIANTS, attention, random_inputs, run_reference
from tvm import relax, s_tir, tirx

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.build import build_with_phases
from tvm_fusion_ext.driver.evaluation import parse_target
from tvm_fusion_ext.ir_utils import StructuralMemo
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype, build, run
from tvm_fusion_ext.tir_passes import CPUAttention, VectorExp, match_attention

TARGET = parse_target("llvm")  # the host's mcpu: the rule takes its vector lanes from it

KERNEL_CASES = {
    "small head (padded to whole vectors)": VARIANTS["divide by a constant"],
    "K not transposed": VARIANTS["K not transposed"],
    "V transposed": VARIANTS["V transposed"],
    "two batch axes": VARIANTS["two batch axes"],
    "37 queries, 45 keys": {"batch": (3,), "queries": 37, "keys": 45, "dim": 64, "head": 64},
    "ViT-Ti's 197 tokens": {"batch": (3,), "queries": 197, "keys": 197, "dim": 64, "head": 64,
                            "scale": ("multiply", 0.125)},
}


def _scheduled(func):
    sch = CPUAttention().apply(func, TARGET, False)
    assert sch is not None
    return sch.mod["main"]


def _run_scheduled(func, inputs):
    """The CPUAttention kernel of ``func`` on ``inputs``, after VectorExp as the CPU pipeline runs it."""
    mod = VectorExp()(tvm.IRModule({"main": _scheduled(func).with_attr("global_symbol", "main")}))
    out = tvm.runtime.empty([int(x) for x in func.params[-1].ty.shape], "float32")
    tvm.compile(mod, TARGET)["main"](*(tvm.runtime.tensor(x) for x in inputs), out)
    return out.numpy()


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_the_kernel_computes_what_the_matched_function_computes(case):
    func = attention(**KERNEL_CASES[case])
    inputs = random_inputs(func)
    np.testing.assert_allclose(_run_scheduled(func, inputs), run_reference(func, inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", NEAR_MISSES)
def test_near_misses_are_declined(variant):
    rule = CPUAttention()
    assert rule.apply(attention(**NEAR_MISSES[variant]), TARGET, False) is None
    assert not rule.applicable and rule.reason is None   # passed over: not attention, no remark


def test_gpu_targets_are_declined():
    rule = CPUAttention()
    assert rule.apply(attention(), tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), False) is None
    assert rule.reason == "not a CPU target"


@functools.cache
def _compiled(model: str, args: tuple):
    """``model`` compiled for the CPU under NeoFlow: (executable, fused module, scheduled module)."""
    pytest.importorskip("torch")
    mod = zoo.load(model, dict(args)).relax("torch")
    return mod, *build_with_phases(mod, "neoflow", TARGET)


BERT = ("bert_base", (("seq", 32), ("layers", 1)))


def _attention_kernels(module):
    return {gv.name_hint: f for gv, f in module.functions_items()
            if isinstance(f, tirx.PrimFunc) and match_attention(f) is not None}


def test_bert_attention_kernel_matches_its_cpu_attention_schedule():
    """NeoFlow's BERT attention kernel (Q, K, V read from the QKV projection through the heads'
    reshape and transpose, the output written back through the inverse): the rule's loop nest
    gives what the fused function gives."""
    _, _, fused, _ = _compiled(*BERT)
    (kernel,) = _attention_kernels(fused).values()
    inputs = random_inputs(kernel)
    np.testing.assert_allclose(_run_scheduled(kernel, inputs), run_reference(kernel, inputs),
                               rtol=1e-5, atol=1e-5)


def _allocations(func) -> list:
    """Shapes of the buffers ``func`` allocates, as scheduled and after TIR lowering."""
    shapes = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda block: shapes.extend(
        [int(d) for d in b.shape] for b in block.alloc_buffers))], order="pre")
    lower = tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer()])
    lowered = lower(tvm.IRModule({"main": func}))["main"]
    tvm_ffi.structural_walk(lowered.body, [(tirx.AllocBuffer, lambda alloc: shapes.append(
        [int(d) for d in alloc.buffer.shape]))], order="pre")
    return shapes


def test_bert_attention_kernel_keeps_no_heads_x_seq_x_seq_buffer():
    """One attention kernel, scheduled by CPUAttention (its ``cpu_attention`` block under a
    parallel loop): no parameter and no allocation, before or after lowering, holds
    heads x seq x seq scores."""
    _, _, fused, scheduled = _compiled(*BERT)
    assert len(_attention_kernels(fused)) == 1
    (func,) = [f for _, f in scheduled.functions_items()
               if isinstance(f, tirx.PrimFunc) and 'T.sblock("cpu_attention")' in f.script()]
    assert "T.parallel" in func.script()
    scores = 12 * 32 * 32
    assert all(np.prod([int(d) for d in p.ty.shape]) != scores for p in func.params)
    shapes = _allocations(func)
    assert shapes and max(np.prod(s) for s in shapes) < scores, shapes


def test_neoflow_compiles_bert_as_the_unfused_module_computes_it():
    mod, executable, fused, _ = _compiled(*BERT)
    assert relax.analysis.check_well_formed(fused)
    inputs = [np.asarray(x) for x in zoo.load(BERT[0], dict(BERT[1])).numpy_inputs()]
    expected = run(build(mod, "none", "llvm", "unscheduled"), inputs)
    assert_allclose_by_dtype(run(executable, inputs), expected, context="neoflow")


def test_attention_groups_match_each_kernel_structure_once(monkeypatch):
    """The search for attention groups (``cost/attention_groups.py``) tries the rule only on pairs
    of matmuls with a softmax and no third matmul between them, and once per kernel structure:
    BERT's identical layers cost one match of the attention kernel, and each layer gets its group."""
    pytest.importorskip("torch")
    from tvm_fusion_ext.analysis.graph import build_graphs
    from tvm_fusion_ext.cost import attention_groups as search
    from tvm_fusion_ext.pipelines import preprocess_passes

    matched = []
    apply = CPUAttention.apply
    monkeypatch.setattr(CPUAttention, "apply", lambda self, func, target, tunable:
                        matched.append(tvm_ffi.structural_hash(func)) or apply(self, func, target, tunable))
    monkeypatch.setattr(search, "_SCHEDULES_WHOLE", StructuralMemo(search.MEMO_SIZE))  # an empty memo
    mod = zoo.load("bert_base", {"seq": 32, "layers": 3}).relax("torch")
    with TARGET:
        mod = tvm.transform.Sequential(preprocess_passes())(mod)
    (graph,) = build_graphs(mod)
    groups = search.attention_groups(graph, TARGET)
    assert len(groups) == 3 and len({len(g.members) for g in groups}) == 1
    assert len(matched) == len(set(matched)) <= 6  # one pair per layer, at most six member sets each
    # a persistent store (a cost model's ``remembered``) keeps each verdict under the group's
    # structure: a graph of the same model built again (a second compile) asks the rule nothing
    store = {}

    def remembered(key, compute):
        if key not in store:
            store[key] = compute()
        return store[key]

    monkeypatch.setattr(search, "_SCHEDULES_WHOLE", StructuralMemo(search.MEMO_SIZE))
    assert search.attention_groups(build_graphs(mod)[0], TARGET, remembered) == groups
    assert any(key.startswith("whole:CPUAttention:") and taken for key, taken in store.items())
    matched.clear()
    monkeypatch.setattr(search, "_SCHEDULES_WHOLE", StructuralMemo(search.MEMO_SIZE))
    assert search.attention_groups(build_graphs(mod)[0], TARGET, remembered) == groups
    assert matched == []


def test_a_merge_across_an_attention_kernel_is_refused_without_predicting_a_kernel():
    """A merge taking the ops of an attention group together with an op outside it would keep the
    attention from its rule (``ProfitabilityCheck.verdict``): it is refused whatever its parts
    cost, so no kernel is made or scheduled for it (a CPUAttention schedule is the dearest one)."""
    pytest.importorskip("torch")
    from tvm_fusion_ext.analysis.graph import build_graphs
    from tvm_fusion_ext.cost import ProfitabilityCheck
    from tvm_fusion_ext.cost.attention_groups import attention_groups
    from tvm_fusion_ext.pipelines import preprocess_passes

    class CountingModel:
        def __init__(self):
            self.predicted = []

        def seconds(self, func):
            self.predicted.append(func)
            return 1e-3

        def remembered(self, _key, predict):
            return predict()

    mod = zoo.load("bert_base", {"seq": 32, "layers": 1}).relax("torch")
    with TARGET:
        mod = tvm.transform.Sequential(preprocess_passes())(mod)
    (graph,) = build_graphs(mod)
    (group,) = attention_groups(graph, TARGET)
    consumer = next(n.index for n in graph.nodes if n.index not in group.members
                    and any(i in group.members for i in n.inputs) and n.prim_func is not None)
    model = CountingModel()
    verdict = ProfitabilityCheck(TARGET, model=model).verdict(graph, [group.members, [consumer]])
    assert not verdict.profitable and verdict.gain_s == -np.inf and verdict.refused, verdict.describe()
    assert model.predicted == []


def test_a_step_inside_an_attention_kernel_is_judged_only_as_a_final_group():
    """A merge strictly inside an attention group is a step towards the kernel the rule takes
    whole (NeoFlow's search), left to the strategy; as a finished group (APOLLO checks its groups
    with ``final``) it is a kernel of its own and is predicted like any group."""
    pytest.importorskip("torch")
    from tvm_fusion_ext.analysis.graph import OpPattern, build_graphs
    from tvm_fusion_ext.cost import ProfitabilityCheck
    from tvm_fusion_ext.cost.attention_groups import attention_groups
    from tvm_fusion_ext.pipelines import preprocess_passes

    mod = zoo.load("bert_base", {"seq": 32, "layers": 1}).relax("torch")
    with TARGET:
        mod = tvm.transform.Sequential(preprocess_passes())(mod)
    (graph,) = build_graphs(mod)
    (group,) = attention_groups(graph, TARGET)
    matmul = next(m for m in sorted(group.members) if graph.nodes[m].pattern >= OpPattern.OUT_EWISE_FUSABLE)
    step = [matmul, next(c for c in graph.nodes[matmul].outputs if c in group.members)]
    check = ProfitabilityCheck(TARGET)
    assert check.verdict(graph, [[n] for n in step]).fused_s is None
    final = check.verdict(graph, [[n] for n in step], final=True)
    assert final.fused_s is not None and final.parts_s is not None, final.describe()

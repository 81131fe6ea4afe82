"""FlashAttention for the CUDA backend (``tvm_fusion_ext/tir_passes/attention_pattern.py``,
``flash_attention.py``): the matcher takes exactly attention (layout variants included) and
declines near-misses; the kernel written from a match computes what the matched function
computes (checked on the CPU through its serial form, and on a GPU where there is one); BERT's
attention under NeoFlow, the strategy that groups all of it, becomes one ``__global__`` kernel with
``__shared__`` tiles and no global buffer of heads x seq x seq scores."""

import functools
import re

import numpy as np
import pytest
import tvm
from cases.attention import NEAR_MISSES, VARIANTS, attention, random_inputs, run_reference
from tvm import s_tir, te, tirx, topi

from tvm_fusion_ext import zoo
from tvm_fusion_ext.backends.cuda import CUDABackend
from tvm_fusion_ext.pipelines import fusion_pipeline
from tvm_fusion_ext.tir_passes import FlashAttention, flash_attention_func, match_attention

TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
H100_LIMITS = {"max_shared_memory_per_block": 48 * 1024, "max_threads_per_block": 1024,
               "max_thread_x": 1024, "max_thread_y": 1024, "max_thread_z": 64, "max_vthread": 8,
               "max_vector_bytes": 16}


@functools.cache
def _bert_attention_kernel(fusion="neoflow"):
    """BERT's (small) attention kernel(s) after ``fusion`` and FuseTIR: the PrimFuncs that read
    the softmax's blocks."""
    pytest.importorskip("torch")
    mod = zoo.load("bert_base", zoo.SMALL_ARGS["bert_base"]).relax("torch")
    with TARGET:
        fused = fusion_pipeline(fusion, TARGET)(mod)
    return {gv.name_hint: f for gv, f in fused.functions_items()
            if isinstance(f, tirx.PrimFunc) and "T_softmax_exp" in f.script()}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_serial_kernel_computes_what_the_matched_function_computes(variant):
    func = attention(**VARIANTS[variant])
    pattern = match_attention(func)
    assert pattern is not None, variant
    inputs = random_inputs(func)
    expected = run_reference(func, inputs)
    actual = run_reference(flash_attention_func(pattern, threads=False), inputs)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", NEAR_MISSES)
def test_near_misses_are_declined(variant):
    func = attention(**NEAR_MISSES[variant])
    assert match_attention(func) is None
    assert FlashAttention().apply(func, TARGET, False) is None


def test_other_kernels_are_declined():
    """A matmul chain (``tests/tir_cases``' two_matmuls shape) and a lone softmax are not attention."""
    a, w1, w2 = te.placeholder((16, 32), name="a"), te.placeholder((32, 32), name="w1"), \
        te.placeholder((32, 8), name="w2")
    two = topi.matmul(topi.matmul(a, w1), w2)
    assert match_attention(te.create_prim_func([a, w1, w2, two])) is None
    x = te.placeholder((4, 16, 16), name="x")
    assert match_attention(te.create_prim_func([x, topi.nn.softmax(x)])) is None


def test_the_rule_declines_non_gpu_targets():
    assert FlashAttention().apply(attention(), tvm.target.Target("llvm"), False) is None


def test_bert_attention_is_matched_under_neoflow_only_as_a_whole():
    """NeoFlow fuses Q·Kᵀ, the scale, the softmax and ·V (with the heads' transpose back) into one
    kernel; it matches, with the scale 1/8 from the IR and the output written at (seq, head x 64 + d).
    The other strategies cut attention at the matmuls, so their softmax kernels are declined."""
    (kernel,) = _bert_attention_kernel("neoflow").values()
    pattern = match_attention(kernel)
    assert pattern is not None
    assert [e for _, e in pattern.batch] == [12] and pattern.query[1] == pattern.key[1] == 16
    assert pattern.contract[1] == pattern.head[1] == 64
    assert "T.float32(8.0)" in pattern.score.script()
    assert pattern.output.same_as(kernel.params[-1])
    for func in _bert_attention_kernel("stock").values():
        assert match_attention(func) is None


def test_bert_attention_runs_as_one_flash_attention_kernel_on_sm_90():
    """The scheduled kernel: one ``__global__`` function with ``__shared__`` K/V tiles, its only
    parameters the kernel's own (Q, K, V, output), no local or global allocation of heads x seq x
    seq elements, and within the H100's limits."""
    (kernel,) = _bert_attention_kernel("neoflow").values()
    scheduled = tvm.IRModule({"main": kernel})
    with TARGET:
        scheduled = tvm.transform.Sequential(CUDABackend().schedule_passes(TARGET, "untuned"))(scheduled)
    lower, _, _ = s_tir.pipeline.default_s_tir_pipeline()
    with TARGET:
        lowered = lower(tvm.IRModule({"main": scheduled["main"].with_attr("global_symbol", "main")
                                      .with_attr("target", TARGET)}))
    assert s_tir.analysis.verify_gpu_code(lowered["main"], H100_LIMITS)
    executable = tvm.compile(tvm.IRModule({"main": scheduled["main"].with_attr("global_symbol", "main")}),
                             TARGET)
    source = "\n".join(m.inspect_source() for m in executable.mod.imports if m.kind == "cuda")
    kernels = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\) \{', source)
    assert len(kernels) == 1, kernels
    parameters = [p.split()[-1].removesuffix("_ptr") for p in kernels[0][1].split(",")]
    assert sorted(parameters) == sorted(p.name for p in kernel.params)
    assert "__shared__" in source and "__syncthreads()" in source
    sizes = [int(n) for n in re.findall(r"float \w+\[(\d+)\]", source)]
    assert sizes and max(sizes) < 12 * 16 * 16


@pytest.mark.skipif(not tvm.cuda().exist, reason="no CUDA GPU on this machine (tvm.cuda().exist is false)")
@pytest.mark.parametrize("variant", ["divide by a constant", "V transposed", "two batch axes"])
def test_the_gpu_kernel_matches_the_function_on_the_gpu(variant):
    func = attention(**VARIANTS[variant])
    scheduled = FlashAttention().apply(func, TARGET, False).mod["main"]
    executable = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), TARGET)
    inputs = random_inputs(func, seed=1)
    device = tvm.cuda()
    out = tvm.runtime.empty([int(x) for x in func.params[-1].ty.shape], "float32", device)
    executable["main"](*(tvm.runtime.tensor(x, device) for x in inputs), out)
    np.testing.assert_allclose(out.numpy(), run_reference(func, inputs), rtol=1e-4, atol=1e-5)

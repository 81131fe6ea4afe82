#!/usr/bin/env python
"""Time ViT-Ti's attention kernels alone: ``Q·Kᵀ/√d`` and ``softmax(Q·Kᵀ/√d)·V`` for 3 heads of
197 tokens x 64, under one strategy, as the minimum of many runs (the kernels take well under a
millisecond, so the minimum is what a quiet core gives), and check them against NumPy.

    .venv/bin/python scripts/bench_attention.py --fusion stock,apollo
    PYTHONPATH=/path/to/an/older/checkout .venv/bin/python scripts/bench_attention.py   # a baseline

It uses only ``tvm_fusion_ext.pipeline`` and TVM, so it runs on older checkouts of the package.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count()))

import numpy as np
import tvm
from tvm import relax

import tvm_fusion_ext


def attention(heads: int, tokens: int, head_dim: int, scores_only: bool) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    shape = relax.TensorType((1, heads, tokens, head_dim), "float32")
    q, k, v = relax.Var("q", shape), relax.Var("k", shape), relax.Var("v", shape)
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            keys = relax.op.permute_dims(k, [0, 1, 3, 2])
            scale = relax.const(float(np.sqrt(head_dim)), "float32")
            scores = bb.emit(relax.op.divide(relax.op.matmul(q, keys), scale))
            if scores_only:
                out = bb.emit_output(scores)
            else:
                out = bb.emit_output(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores, axis=-1)), v))
        bb.emit_func_output(out)
    return bb.get()


def reference(q, k, v, scores_only: bool) -> np.ndarray:
    scores = q.astype("float64") @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if scores_only:
        return scores
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusion", default="stock", help="comma-separated strategies")
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()})
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, args.heads, args.tokens, args.head_dim)).astype("float32") for _ in range(3)]
    print(f"package {os.path.dirname(tvm_fusion_ext.__file__)}, {os.environ['TVM_NUM_THREADS']} threads")
    for fusion in args.fusion.split(","):
        for scores_only, what in ((True, "Q·Kᵀ/√d"), (False, "attention")):
            mod = attention(args.heads, args.tokens, args.head_dim, scores_only)
            ex = tvm.compile(mod, target, relax_pipeline=tvm_fusion_ext.pipeline(fusion, target))
            run = relax.VirtualMachine(ex, tvm.cpu())["main"]
            tensors = [tvm.runtime.tensor(x) for x in inputs]
            error = np.abs(run(*tensors).numpy() - reference(*inputs, scores_only)).max()
            for _ in range(10):
                run(*tensors)
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                run(*tensors)
                times.append(time.perf_counter() - start)
            flops = 2 * args.heads * args.tokens ** 2 * args.head_dim * (1 if scores_only else 2)
            best = min(times)
            print(f"{fusion:12s} {what:10s} min {best * 1e3:.3f} ms, median {np.median(times) * 1e3:.3f} ms "
                  f"({flops / best / 1e9:.1f} GFLOP/s), max abs error vs NumPy {error:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

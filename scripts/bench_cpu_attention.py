#!/usr/bin/env python
"""Time attention on the CPU: stock FuseOps' three kernels (``Q·Kᵀ/√d``, softmax, ``·V``) against the
one kernel NeoFlow groups and CPUAttention schedules, for BERT-base (12 heads, 128 and 512 tokens)
and ViT-Ti (3 heads, 197 tokens), head size 64, K given transposed (no transpose kernel).

    .venv/bin/python scripts/bench_cpu_attention.py                        # all three shapes
    .venv/bin/python scripts/bench_cpu_attention.py --shapes bert512 --rounds 7

Both modules are compiled through the package's pipelines (untuned policy, target ``llvm`` with the
host's mcpu) and checked against each other. Each round times the two alternately
(:func:`~tvm_fusion_ext.driver.evaluation.measure_interleaved_ms`); the line gives the median of
the rounds' medians and the range of the per-round speedups. On a shared machine the absolute
times drift from round to round; the speedups are what the interleaving makes comparable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import tvm
from tvm import relax, tirx

from tvm_fusion_ext.driver.build import build_with_phases
from tvm_fusion_ext.driver.evaluation import measure_interleaved_ms, parse_target
from tvm_fusion_ext.tir_passes import match_attention

SHAPES = {"bert128": (12, 128, 64), "bert512": (12, 512, 64), "vit197": (3, 197, 64)}


def attention(heads: int, tokens: int, head_dim: int) -> tvm.IRModule:
    """``softmax(Q·Kᵀ/√d)·V`` with ``Kᵀ`` an input, as Relax ops."""
    q = relax.Var("q", relax.TensorType((heads, tokens, head_dim), "float32"))
    kt = relax.Var("kt", relax.TensorType((heads, head_dim, tokens), "float32"))
    v = relax.Var("v", relax.TensorType((heads, tokens, head_dim), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [q, kt, v]):
        with bb.dataflow():
            scale = relax.const(float(np.sqrt(head_dim)), "float32")
            scores = bb.emit(relax.op.divide(relax.op.matmul(q, kt), scale))
            probs = bb.emit(relax.op.nn.softmax(scores, axis=-1))
            out = bb.emit_output(relax.op.matmul(probs, v))
        bb.emit_func_output(out)
    return bb.get()


def kernels(fused: tvm.IRModule) -> list[str]:
    return [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per row and round")
    args = parser.parse_args()
    target = parse_target("llvm")
    rng = np.random.default_rng(0)
    for name in args.shapes.split(","):
        mod = attention(*SHAPES[name])
        inputs = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32"))
                  for p in mod["main"].params]
        vms, outputs = {}, {}
        for fusion in ("stock", "neoflow"):
            executable, fused, _ = build_with_phases(mod, fusion, target)
            vms[fusion] = relax.VirtualMachine(executable, tvm.cpu())
            outputs[fusion] = vms[fusion]["main"](*inputs).numpy()
            attention_kernels = sum(match_attention(fused[k]) is not None for k in kernels(fused))
            print(f"{name} {fusion}: kernels {kernels(fused)}, attention kernels {attention_kernels}")
        error = float(np.abs(outputs["stock"] - outputs["neoflow"]).max())
        rounds = [measure_interleaved_ms({f: (lambda vm=vm, inputs=inputs: vm["main"](*inputs)) for f, vm in vms.items()},
                                         min_seconds=args.seconds) for _ in range(args.rounds)]
        stock = statistics.median(r["stock"] for r in rounds)
        fused = statistics.median(r["neoflow"] for r in rounds)
        speedups = sorted(r["stock"] / r["neoflow"] for r in rounds)
        print(f"{name}: stock {stock:.3f} ms, neoflow {fused:.3f} ms, speedup {stock / fused:.2f}x "
              f"(rounds {speedups[0]:.2f}x-{speedups[-1]:.2f}x, max abs difference {error:.1e})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

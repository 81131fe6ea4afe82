#!/usr/bin/env python
"""What ``PointwiseConvAsMatmul`` is worth on this machine: 1x1 convs alone, then whole models.

    .venv/bin/python scripts/bench_pointwise_conv.py --models resnet50 --fusion stock,apollo,neoflow

1. Each 1x1 conv shape of ResNet-50's bottlenecks (with its bias, residual add and ReLU, as the
   network runs it) compiled by the ``stock`` pipeline as a conv (the pass kept from rewriting
   it) and as the pass's flat matmul, timed in turns; the pass's decision is printed beside it.
2. Each model and strategy compiled with the pass and without it (its decision forced to "keep
   the conv"), every build timed in turns within each of ``--rounds`` rounds
   (``driver.evaluation.measure_interleaved_ms``); a row's speed-up is the median of its
   per-round ratios to ``stock`` without the pass.

Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.driver.build import build
from tvm_fusion_ext.driver.evaluation import (
    configure_threads,
    load_workload,
    measure_interleaved_ms,
    parse_model_spec,
    parse_target,
)
from tvm_fusion_ext.hardware import spec_for_target
from tvm_fusion_ext.relax_passes import pointwise_conv_as_matmul

# (input channels, output channels, image side) of ResNet-50's stride-1 1x1 convs at 224 x 224
SHAPES = [(64, 256, 56), (256, 64, 56), (128, 512, 28), (512, 128, 28), (256, 1024, 14), (512, 2048, 7),
          (2048, 512, 7)]


def pointwise_block(channels: int, features: int, side: int, as_matmul: bool) -> tvm.IRModule:
    """conv 1x1 -> bias -> residual add -> ReLU, written as a conv or as the pass writes it."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((features, channels, 1, 1)) / np.sqrt(channels)).astype("float32")
    bias = rng.standard_normal((1, features, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, side, side), "float32"))
    residual = relax.Var("residual", relax.TensorType((1, features, side, side), "float32"))
    with bb.function("main", [x, residual]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, relax.const(weight))
            if as_matmul:
                conv = pointwise_conv_as_matmul.as_matmul(bb.normalize(conv), (1, channels, side, side, features))
            y = bb.emit(relax.op.add(bb.emit(conv), relax.const(bias)))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(y, residual))))
        bb.emit_func_output(out)
    return bb.get()


def time_rounds(fns: dict, rounds: int) -> dict[str, list[float]]:
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, ms in measure_interleaved_ms(fns).items():
            times[name].append(ms)
    return times


def runner(executable, inputs):
    main = relax.VirtualMachine(executable, tvm.cpu())["main"]
    args = [tvm.runtime.tensor(x) for x in inputs]
    return lambda: main(*args)


def shapes_table(target, rounds: int) -> None:
    spec = spec_for_target(target)
    print("| 1x1 conv (in -> out, image) | conv us | flat matmul us | matmul speed-up | the pass decides |")
    print("|---|---:|---:|---:|---|")
    rng = np.random.default_rng(1)
    for channels, features, side in SHAPES:
        inputs = [rng.standard_normal((1, channels, side, side)).astype("float32"),
                  rng.standard_normal((1, features, side, side)).astype("float32")]
        decide = pointwise_conv_as_matmul.matmul_is_cheaper
        pointwise_conv_as_matmul.matmul_is_cheaper = lambda *args: False  # the conv stays a conv
        try:
            fns = {form: runner(build(pointwise_block(channels, features, side, form == "matmul"), "stock", target),
                                inputs) for form in ("conv", "matmul")}
        finally:
            pointwise_conv_as_matmul.matmul_is_cheaper = decide
        times = time_rounds(fns, rounds)
        ratio = statistics.median(c / m for c, m in zip(times["conv"], times["matmul"]))
        decided = decide(1, channels, side, side, features, "float32", spec)
        print(f"| {channels} -> {features}, {side}x{side} | {statistics.median(times['conv']) * 1e3:.1f} | "
              f"{statistics.median(times['matmul']) * 1e3:.1f} | {ratio:.2f}x | "
              f"{'matmul' if decided else 'conv'} |", flush=True)


def models_table(models: str, fusions: list[str], target, rounds: int) -> None:
    decide = pointwise_conv_as_matmul.matmul_is_cheaper
    print("\n| model | row | ms | speed-up vs stock without the pass |")
    print("|---|---|---:|---:|")
    for item in models.split(","):
        name, extra = parse_model_spec(item)
        workload = load_workload(name, ["batch=1", *extra])
        fns = {}
        try:
            for variant in ("without", "with"):
                pointwise_conv_as_matmul.matmul_is_cheaper = decide if variant == "with" else (lambda *args: False)
                for fusion in fusions:
                    fns[f"{fusion} {variant} the pass"] = runner(build(workload.mod, fusion, target), workload.inputs)
        finally:
            pointwise_conv_as_matmul.matmul_is_cheaper = decide
        times = time_rounds(fns, rounds)
        base = times[f"{fusions[0]} without the pass"]
        for row, ms in times.items():
            speedup = statistics.median(b / m for b, m in zip(base, ms))
            print(f"| {item} | {row} | {statistics.median(ms):.3f} | {speedup:.3f}x |", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50", help="zoo models, NAME[:KEY=VALUE;...], comma-separated")
    parser.add_argument("--fusion", default="stock,apollo,neoflow")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--skip-shapes", action="store_true", help="only the models")
    args = parser.parse_args(argv)
    configure_threads(args.threads)
    target = parse_target("llvm")
    print(f"target {target}")
    if not args.skip_shapes:
        shapes_table(target, args.rounds)
    if args.models:
        models_table(args.models, [f.strip() for f in args.fusion.split(",")], target, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

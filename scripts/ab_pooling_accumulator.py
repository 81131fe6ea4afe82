#!/usr/bin/env python
"""In-process A/B of ``AnchorLoopFusion``'s pooling accumulator (``tir_passes/loop_fusion.py``):
a 3x3 max pooling of stride 2 and padding 1 scheduled by the rule as it is, against the rule with
``BlockInfo.is_windowed`` forced False (the pooling tiled as its own anchor, as before the
accumulator), alone and under an element-wise epilogue; both checked against NumPy and timed in
interleaved rounds on this CPU.

    .venv/bin/python scripts/ab_pooling_accumulator.py 2x128x56x56 1x64x112x112 4x64x112x112
"""

from __future__ import annotations

import argparse

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.driver.evaluation import parse_target
from tvm_fusion_ext.hardware import spec_for_target
from tvm_fusion_ext.tir_passes import AnchorLoopFusion
from tvm_fusion_ext.tir_passes.analysis import BlockInfo

TARGET = '{"kind": "llvm", "num-cores": 2}'  # this machine's CPU (parse_target adds its mcpu)


def pooling(shape: tuple[int, ...], epilogue: bool) -> tvm.tirx.PrimFunc:
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit(relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1)))
            out = bb.emit_output(relax.op.add(out, out) if epilogue else out)
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod)))
    func = next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    return func.with_attr("global_symbol", "main")


def build(func, target, accumulator: bool):
    windowed = BlockInfo.is_windowed
    if not accumulator:
        BlockInfo.is_windowed = property(lambda self: False)
    try:
        sch = AnchorLoopFusion(spec_for_target(target)).apply(func, target, False)
    finally:
        BlockInfo.is_windowed = windowed
    return tvm.compile(sch.mod, target=target).jit()


def reference(x: np.ndarray, epilogue: bool) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    out = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-2, -1))
    return out * 2 if epilogue else out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="NCHW input shapes, e.g. 2x128x56x56")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    target = parse_target(TARGET)
    print("| input | epilogue | before ms | after ms | speed-up |\n|---|---|---:|---:|---:|")
    for text in args.shapes:
        shape = tuple(int(d) for d in text.split("x"))
        x = np.random.default_rng(0).normal(size=shape).astype("float32")
        for epilogue in (False, True):
            func = pooling(shape, epilogue)
            libs = {on: build(func, target, on) for on in (False, True)}
            expected = reference(x, epilogue)
            times = {on: [] for on in libs}
            for _ in range(args.rounds):
                for on, lib in libs.items():
                    out = tvm.runtime.tensor(np.zeros(expected.shape, "float32"))
                    times[on].append(lib.time_evaluator("main", tvm.cpu(), number=30)(tvm.runtime.tensor(x), out).mean)
                    np.testing.assert_array_equal(out.numpy(), expected)
            before, after = (float(np.median(times[on])) * 1e3 for on in (False, True))
            print(f"| {text} | {'add' if epilogue else '-'} | {before:.3f} | {after:.3f} | {before / after:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

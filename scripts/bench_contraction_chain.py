#!/usr/bin/env python
"""A contraction chain as one kernel vs its two contractions as separate kernels, A/B interleaved.

    .venv/bin/python scripts/bench_contraction_chain.py                 # every shape below
    .venv/bin/python scripts/bench_contraction_chain.py --only dw --threads 2
    .venv/bin/python scripts/bench_contraction_chain.py --only dw --layout NHWC  # as ChannelsLast leaves them

For each shape, in one process: the chain compiled with ``main`` as one group (the kernel
``tir_passes.contraction_chain`` schedules, or whichever rule takes it) and with TVM's ``FuseOps``
groups (each contraction with its epilogue: stock's kernels), both under the ``untuned`` policy;
outputs are checked against each other on random inputs, then both are timed in turns
(``measure_interleaved_ms``). The table gives both medians, the speedup of the chain kernel and the
rule that scheduled it.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np
import tvm
from tvm import relax

from tvm_fusion_ext.driver.build import random_inputs
from tvm_fusion_ext.driver.evaluation import (
    configure_threads,
    machine_description,
    measure_interleaved_ms,
    parse_target,
)
from tvm_fusion_ext.testing.chains import chain_kernel, chain_pipeline, dw_pw_module, mlp_module
from tvm_fusion_ext.tir_passes import DefaultSchedule

SHAPES = {
    "dw 112x112x32 -> 16": lambda layout: dw_pw_module(32, 112, 16, layout=layout),
    "dw 56x56x144 -> 24": lambda layout: dw_pw_module(144, 56, 24, layout=layout),
    "dw 28x28x192 -> 32": lambda layout: dw_pw_module(192, 28, 32, layout=layout),
    "dw 14x14x384 -> 64": lambda layout: dw_pw_module(384, 14, 64, layout=layout),
    "dw 7x7x960 -> 160": lambda layout: dw_pw_module(960, 7, 160, layout=layout),
    "mlp 64x32 -> 128": lambda _: mlp_module(64, 32),
    "mlp BERT-base 128x768 -> 3072": lambda _: mlp_module(128, 768),
    "mlp ViT-Ti 197x192 -> 768": lambda _: mlp_module(197, 192),
}


def _scheduling_rule(mod: tvm.IRModule, target: tvm.target.Target) -> str:
    """The rule the default schedule gives the chain kernel of ``mod``."""
    schedule = DefaultSchedule(target)
    schedule(tvm.IRModule({"main": chain_kernel(mod, target)}))
    return ",".join(schedule.stats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the shapes whose name contains this")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"),
                        help="layout of the depthwise-pointwise shapes")
    parser.add_argument("--seconds", type=float, default=0.5, help="timed seconds per variant and shape")
    args = parser.parse_args(argv)
    threads = configure_threads(args.threads)
    target = parse_target(args.target)
    print(machine_description(threads))
    print(f"{'shape':32} {'parts ms':>9} {'chain ms':>9} {'speedup':>8}  rule")
    for name, build in SHAPES.items():
        if args.only not in name:
            continue
        mod = build(args.layout)
        inputs = [tvm.runtime.tensor(x) for x in random_inputs(mod["main"])]
        vms = {}
        for label, fused in (("parts", False), ("chain", True)):
            ex = tvm.compile(mod, target, relax_pipeline=chain_pipeline(target, fused))
            vms[label] = relax.VirtualMachine(ex, tvm.cpu())["main"]
        outputs = {label: fn(*inputs).numpy() for label, fn in vms.items()}
        np.testing.assert_allclose(outputs["chain"], outputs["parts"], rtol=1e-4, atol=1e-4)
        times = measure_interleaved_ms({label: (lambda fn=fn, args=inputs: fn(*args)) for label, fn in vms.items()},
                                       min_seconds=args.seconds)
        print(f"{name:32} {times['parts']:9.3f} {times['chain']:9.3f} {times['parts'] / times['chain']:7.2f}x"
              f"  {_scheduling_rule(mod, target)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

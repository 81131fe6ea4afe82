"""NeoFlow benchmarks: capsule convolution before/after parallel fusion (NeoFlow
section 7.4 reports 9.66x), and MI-LSTM / LLTM latency under ``stock`` vs ``neoflow``.

    .venv/bin/python scripts/bench_neoflow.py [--threads N] [--policy untuned] [--json out.json]

Rows (all compiled for ``llvm`` under the same scheduling policy, timed with the same helper as
``tvm-fusion compare``, median of warm runs):

* ``capsule_conv``: ``stock``; ``neoflow without parallel fusion`` (the neoflow strategy with
  the ParallelFusion pass left out: 8 conv2d kernels); ``neoflow`` (one conv2d kernel);
* ``mi_lstm`` and ``lltm`` (zoo default sizes): ``stock`` and ``neoflow``.

Every row is checked against PyTorch eager before it is timed.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, s_tir

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.evaluation import configure_threads, machine_description, measure_latency_ms
from tvm_fusion_ext.pipelines import fusion_pipeline, lowering_passes, preprocess_passes, schedule_passes
from tvm_fusion_ext.relax_passes.neoflow_fusion import NeoFlowFusion
from tvm_fusion_ext.relax_passes.schedule_execution_order import ScheduleExecutionOrder
from tvm_fusion_ext.relax_passes.simplify import Simplify
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype, build, kernel_traffic, run

TARGET = tvm.target.Target("llvm")
MIN_SECONDS = 2.0  # timed wall time per row
QUICK_SIZES = {"capsule_conv": {"channels": 4, "image": 8},
               "mi_lstm": {"batch": 2, "input_size": 8, "hidden_size": 8},
               "lltm": {"batch": 2, "input_features": 8, "state_size": 8}}


def _ablation_fusion() -> tvm.transform.Pass:
    """The neoflow strategy's fusion passes with ParallelFusion left out (section 7.4's ablation)."""
    return tvm.transform.Sequential([
        *preprocess_passes([Simplify()]), NeoFlowFusion(), ScheduleExecutionOrder(),
        relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])


def neoflow_without_parallel_fusion(policy: str) -> tvm.transform.Pass:
    """The complete pipeline around :func:`_ablation_fusion`."""
    fusion = _ablation_fusion()

    @tvm.transform.module_pass(opt_level=0, name="neoflow_without_parallel_fusion")
    def _pipeline(mod, _ctx):
        with TARGET:
            return tvm.transform.Sequential(
                [fusion, *schedule_passes(TARGET, policy), *lowering_passes(TARGET)])(mod)

    return _pipeline


def row(model, mod, label, fusion, policy):
    executable = build(mod, fusion, TARGET, policy)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    outputs = run(executable, model.numpy_inputs())
    assert_allclose_by_dtype(outputs, model.reference_outputs(), context=f"{model.name}/{label}")
    inputs = [tvm.runtime.tensor(x) for x in model.numpy_inputs()]
    with TARGET:
        fused = (fusion_pipeline(fusion, TARGET) if isinstance(fusion, str) else _ablation_fusion())(mod)
    kernels = kernel_traffic(fused).kernels
    convs = _conv2d_loop_nests(fused)
    latency = measure_latency_ms(lambda: vm["main"](*inputs), min_seconds=MIN_SECONDS)
    return {"model": model.name, "fusion": label, "kernels": kernels, "conv2d_nests": convs,
            "latency_ms": latency}


def _conv2d_loop_nests(mod: tvm.IRModule) -> int:
    """conv2d computations run per inference (sblocks named ``conv2d*`` in each called kernel):
    8 -> 1 is what parallel fusion does to the capsule convolution, even when all 8 end up in one
    fused kernel."""
    count = 0

    def visit(expr):
        nonlocal count
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name == "relax.call_tir":
            blocks = []
            tvm_ffi.structural_walk(mod[expr.args[0]].body, [(s_tir.SBlock, blocks.append)],
                                    order="pre")
            count += sum(1 for b in blocks if b.name_hint.startswith("conv2d"))

    relax.analysis.post_order_visit(mod["main"], visit)
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--policy", default="untuned", choices=["unscheduled", "untuned"])
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="tiny model sizes: checks the script runs, numbers mean nothing")
    args = parser.parse_args()
    sizes = QUICK_SIZES if args.quick else {}
    threads = configure_threads(args.threads)
    rows = []
    capsule = zoo.load("capsule_conv", sizes.get("capsule_conv"))
    mod = capsule.relax("torch")
    rows.append(row(capsule, mod, "stock", "stock", args.policy))
    rows.append(row(capsule, mod, "neoflow without parallel fusion",
                    neoflow_without_parallel_fusion(args.policy), args.policy))
    rows.append(row(capsule, mod, "neoflow", "neoflow", args.policy))
    for name in ("mi_lstm", "lltm"):
        model = zoo.load(name, sizes.get(name))
        mod = model.relax("torch")
        for fusion in ("stock", "neoflow"):
            rows.append(row(model, mod, fusion, fusion, args.policy))

    print(f"machine: {machine_description(threads)}; policy: {args.policy}")
    print("| model | fusion | kernels | conv2d nests | latency (ms) | speed-up vs first row |")
    print("|---|---|---|---|---|---|")
    first = {}
    for r in rows:
        base = first.setdefault(r["model"], r["latency_ms"])
        print(f"| {r['model']} | {r['fusion']} | {r['kernels']} | {r['conv2d_nests']} | {r['latency_ms']:.3f} | "
              f"{base / r['latency_ms']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_description(threads), "policy": args.policy, "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()

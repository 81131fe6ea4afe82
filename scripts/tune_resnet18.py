#!/usr/bin/env python
"""Tune a model's fused kernels with MetaSchedule, then time the tuned and untuned compiles in
the same run: with a small budget on ResNet-18 for llvm, tuning should finish on 2 cores in
under 30 minutes and the tuned compile should be faster than the untuned one.

    .venv/bin/python scripts/tune_resnet18.py --work-dir /tmp/tune_r18 --json r18_tuned.json
    .venv/bin/python scripts/tune_resnet18.py --model resnet_stage --trials 2 --work-dir /tmp/smoke

ResNet-18 under ``stock`` fusion has 22 kernels (17 convolutions). The default budget, 32 trials
per kernel (the untuned schedule + two search rounds of 16), was estimated at 20-25 minutes on
an idle 2-core machine from runs on a loaded one; the search first beat the untuned schedule of a
ResNet stage convolution after about 48 trials (one conv, fresh cost model: 6.4 -> 5.9 ms), and
later kernels start from the cost model the earlier ones trained.

1. fuses the model with ``--fusion`` and tunes every kernel with up to ``--trials`` measured
   candidates (``tvm_fusion_ext.tuning.tune``: XGBoost, in-process builder, local runner or
   ``--rpc-tracker``/``--rpc-key``), into ``--work-dir``; a second run with the same directory
   resumes (and measures nothing when the budget is already spent);
2. compiles the model under the ``untuned`` policy and under ``tuned`` (the records applied by
   ``MetaScheduleApplyDatabase``; kernels without a record keep the untuned schedule), checks both
   against the reference outputs;
3. times both the same way as ``tvm-fusion compare`` (median of at least ``--runs`` runs after
   warm-up), alternating ``--rounds`` times so that drift on a busy machine hits both alike, and
   prints a markdown table and the JSON (also written to ``--json``).

The target is the host CPU (``llvm`` with its ``mcpu`` and ``num-cores`` = ``--threads``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm
from tvm import relax

from tvm_fusion_ext import tuning
from tvm_fusion_ext.driver import evaluation
from tvm_fusion_ext.driver.build import build, max_abs_error, run


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="zoo name, .onnx or torch.export.save file")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--fusion", default="stock", help="fusion strategy whose kernels are tuned")
    parser.add_argument("--target", default="llvm", help="target string or JSON (bare llvm = this CPU)")
    parser.add_argument("--trials", type=int, default=32, help="measured candidates per kernel")
    parser.add_argument("--work-dir", required=True, help="tuning database (resumed if present)")
    parser.add_argument("--threads", type=int, default=None, help="TVM threads (default: all logical CPUs)")
    parser.add_argument("--runs", type=int, default=20, help="minimum timed runs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating untuned/tuned timing rounds")
    parser.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure candidates on RPC servers")
    parser.add_argument("--rpc-key", metavar="KEY")
    parser.add_argument("--json", metavar="PATH", help="also write the result here")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = evaluation.configure_threads(args.threads)
    target = tuning.tuning_target(evaluation.parse_target(args.target), threads)
    workload = evaluation.load_workload(args.model, args.model_arg)
    runner = tuning.rpc_runner(args.rpc_tracker, args.rpc_key) if args.rpc_tracker else None

    start = time.perf_counter()
    report = tuning.tune(workload.mod, args.fusion, target, args.trials, args.work_dir, runner=runner,
                         progress=not args.no_progress)
    tune_s = time.perf_counter() - start
    print(report.table())
    print(report.summary() + f"; {tune_s:.0f} s")

    database = tuning.open_records(args.work_dir, target)
    if database is None:
        raise SystemExit("tune_resnet18.py: error: the tuning database cannot be opened")
    rows = {"untuned": _compile(workload, args.fusion, target, "untuned", None),
            "tuned": _compile(workload, args.fusion, target, "tuned", database)}
    samples = {policy: [] for policy in rows}
    for _ in range(args.rounds):
        for policy, row in rows.items():
            samples[policy].append(evaluation.measure_latency_ms(row["call"], min_runs=args.runs))
    result = {
        "model": workload.name, "model_args": args.model_arg, "fusion": args.fusion, "target": str(target),
        "machine": evaluation.machine_description(threads), "trials_per_task": args.trials,
        "tasks": len(report.tasks), "trials_measured_this_run": report.measured,
        "records": len(database.get_all_tuning_records()), "tune_s": round(tune_s, 1),
        **{policy: {"compile_s": round(row["compile_s"], 2), "latency_ms": round(statistics.median(samples[policy]), 4),
                    "latency_ms_rounds": [round(s, 4) for s in samples[policy]],
                    "max_abs_err": row["max_abs_err"]} for policy, row in rows.items()},
    }
    result["speedup_tuned_vs_untuned"] = round(result["untuned"]["latency_ms"] / result["tuned"]["latency_ms"], 3)
    print()
    print("| policy | compile s | latency ms (median of rounds) | max abs err |")
    print("| --- | ---: | ---: | ---: |")
    for policy in rows:
        r = result[policy]
        print(f"| {policy} | {r['compile_s']:.1f} | {r['latency_ms']:.3f} | {r['max_abs_err']:.2e} |")
    print(f"\ntuned vs untuned: {result['speedup_tuned_vs_untuned']:.2f}x; {result['tasks']} kernels, "
          f"{args.trials} trials each, tuning {tune_s / 60:.1f} min ({result['machine']})")
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
            out.write("\n")
    return 0


def _compile(workload, fusion, target, policy, database) -> dict:
    """Compile under ``policy`` (inside ``database`` when given); compile time, error, a timed call."""
    start = time.perf_counter()
    with database if database is not None else contextlib.nullcontext():
        executable = build(workload.mod, fusion, target, policy)
    compile_s = time.perf_counter() - start
    error = max_abs_error(run(executable, workload.inputs), workload.expected)
    main_fn = relax.VirtualMachine(executable, tvm.cpu())["main"]
    args = [tvm.runtime.tensor(x) for x in workload.inputs]
    return {"compile_s": compile_s, "max_abs_err": error, "call": lambda: main_fn(*args)}


if __name__ == "__main__":
    raise SystemExit(main())

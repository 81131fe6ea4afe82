#!/usr/bin/env python
"""Tune every kernel of a zoo model for a DSA target with MetaSchedule, then compile with the records.

    .venv/bin/python scripts/tune_dsa.py resnet18 --model-arg image=32 --target dsa/stcp920 \\
        --trials 16 --work-dir /tmp/tune_r18

1. builds the zoo model as Relax (``--import``), fuses it with ``--fusion`` (pre-processing,
   fusion and FuseTIR only: ``tvm_fusion_ext.fusion_pipeline``), so the tasks are exactly the
   kernels that strategy produces;
2. tunes each kernel with up to ``--trials`` simulated measurements (``tvm_fusion_ext.tuning.dsa``:
   DSA design space, simulated builder/runner, XGBoost cost model) into the JSON database in
   ``--work-dir``, with a progress bar; kernels that already have ``--trials`` records there are
   not measured again, so a second run with the same directory resumes (or re-measures nothing);
3. compiles the model with the ``untuned`` and the ``tuned`` policy (records applied by
   ``MetaScheduleApplyDatabase`` under the database), checks both against PyTorch, and prints
   the simulated time of each (``target_dsa.profile``). ``<work-dir>/summary.json`` keeps it all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np
import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.build import run
from tvm_fusion_ext.pipelines import fusion_names, fusion_pipeline, pipeline
from tvm_fusion_ext.target_dsa import profile
from tvm_fusion_ext.tuning.dsa import open_database, tune_kernels


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=zoo.model_names(), metavar="MODEL", help="a zoo model")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="override one zoo argument (repeatable), e.g. image=32")
    parser.add_argument("--target", default="dsa/stcp920", help="a dsa/* target tag")
    parser.add_argument("--trials", type=int, required=True,
                        help="simulated measurements per kernel (the untuned default is one)")
    parser.add_argument("--work-dir", required=True, help="JSON database and logs (resumed if present)")
    parser.add_argument("--fusion", default="stock", choices=fusion_names())
    parser.add_argument("--import", dest="importer", default="torch", choices=zoo.IMPORTERS)
    parser.add_argument("--trials-per-iter", type=int, default=8,
                        help="candidates measured per search iteration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    target = tvm.target.Target(args.target)
    if "dsa" not in list(target.keys):
        raise SystemExit(f"tune_dsa.py: error: {args.target} is not a DSA target")
    model = zoo.load(args.model, zoo.parse_model_args(args.model, args.model_arg))
    mod = model.relax(args.importer)
    with target:
        fused = fusion_pipeline(args.fusion, target)(mod)

    report = tune_kernels(fused, target, args.work_dir, args.trials,
                          num_trials_per_iter=args.trials_per_iter, seed=args.seed,
                          progress=not args.no_progress)
    tuned_at = time.perf_counter()
    print(f"\n{'kernel':58s} {'records':>7s} {'new':>4s} {'untuned us':>11s} {'best us':>9s}")
    for k in report.tasks:
        print(f"{k.name[:58]:58s} {k.records_before:7d} {k.measured:4d} "
              f"{_us(k.default_secs):>11s} {_us(k.best_secs):>9s}")
    if report.skipped:
        print(f"not tuned (no DSA schedule, stay as they are): {', '.join(report.skipped)}")
    print(f"simulated measurements this run: {report.measured}")

    inputs = model.numpy_inputs()
    expected = model.reference_outputs()
    results = {}
    database = open_database(args.work_dir, target)
    for policy in ("untuned", "tuned"):
        relax_pipeline = pipeline(args.fusion, target, policy)
        if policy == "tuned":
            with database:
                executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)
        else:
            executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)
        outputs = run(executable, inputs)
        error = max(float(np.max(np.abs(np.asarray(o) - e))) for o, e in zip(outputs, expected))
        results[policy] = {**profile(executable, inputs, target), "max_abs_error_vs_torch": error}
    untuned, tuned = results["untuned"], results["tuned"]
    wall = time.perf_counter() - start
    print(f"\n{args.model} {args.model_arg} on {args.target}, fusion {args.fusion}, "
          f"{args.trials} trials/kernel")
    for policy, res in results.items():
        print(f"  {policy:8s} simulated {res['time_ms']:.4f} ms ({res['cycles']} cycles), "
              f"{res['kernels']} kernels, DDR {res['ddr_bytes']} B, "
              f"max |err| vs PyTorch {res['max_abs_error_vs_torch']:.2e}")
    print(f"  speedup (untuned / tuned): {untuned['cycles'] / tuned['cycles']:.3f}x")
    print(f"  wall time: tuning {tuned_at - start:.1f} s, total {wall:.1f} s")
    summary = {
        "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "model": args.model, "model_args": args.model_arg, "target": args.target,
        "fusion": args.fusion, "trials_per_kernel": args.trials,
        "measured_this_run": report.measured, "skipped": report.skipped,
        "kernels": [{"name": k.name, "records_before": k.records_before, "measured": k.measured,
                     "untuned_us": _us(k.default_secs), "best_us": _us(k.best_secs),
                     "best": repr(k.best)} for k in report.tasks],
        "untuned": untuned, "tuned": tuned, "wall_s": round(wall, 1),
        "tuning_wall_s": round(tuned_at - start, 1),
    }
    with open(os.path.join(args.work_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    return 0


def _us(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e6:.3f}"


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Default TIR schedule vs no schedule vs ONNX Runtime, one run, one table.

    .venv/bin/python scripts/bench_schedule.py                          # ResNet-50, MobileNetV2, BERT-base
    .venv/bin/python scripts/bench_schedule.py --models resnet50 --model-arg resnet50:image=112 \\
        --unscheduled-runs 1 --json /tmp/schedule.json

For each model, in one process: ``stock`` fusion compiled under the ``untuned`` policy (the
package's default schedule, :mod:`tvm_fusion_ext.tir_passes`) and ONNX Runtime are timed back to
back (``tvm_fusion_ext.driver.evaluation.compare``), then ``stock`` under ``unscheduled`` (TVM's own
behaviour without tuning) with few runs, since unscheduled kernels are naive single-threaded loops.
The table gives both latencies, the speedup of the default schedule over no schedule (target: at
least 10x) and its ratio to ONNX Runtime (target: at most 3x); ``--json`` writes the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.evaluation import compare, configure_threads, load_workload, machine_description

DEFAULT_MODELS = "resnet50,mobilenet_v2,bert_base"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated zoo models (default: {DEFAULT_MODELS})")
    parser.add_argument("--model-arg", action="append", default=[], metavar="MODEL:KEY=VALUE",
                        help="override one zoo argument of one model (repeatable), e.g. bert_base:layers=2")
    parser.add_argument("--target", default="llvm", help="TVM target (a bare llvm means this CPU)")
    parser.add_argument("--threads", type=int, default=None, help="threads for TVM and ONNX Runtime (default: all)")
    parser.add_argument("--runs", type=int, default=20, help="minimum timed runs of the scheduled model and ORT")
    parser.add_argument("--unscheduled-runs", type=int, default=3,
                        help="timed runs of the unscheduled model (each can take seconds); 0 skips it")
    parser.add_argument("--json", help="write the rows here")
    return parser.parse_args(argv)


def model_args(models: list[str], overrides: list[str]) -> dict[str, list[str]]:
    """``MODEL:KEY=VALUE`` overrides grouped by model; unknown models or bad forms are errors."""
    grouped: dict[str, list[str]] = {m: [] for m in models}
    for item in overrides:
        model, sep, arg = item.partition(":")
        if not sep or model not in grouped:
            raise ValueError(f"--model-arg {item!r}: expected MODEL:KEY=VALUE with MODEL in {','.join(models)}")
        grouped[model].append(arg)
    return grouped


def bench_model(model: str, args: list[str], opts: argparse.Namespace) -> dict:
    """Latencies of one model under the default schedule, ONNX Runtime and no schedule."""
    workload = load_workload(model, args)
    start = time.perf_counter()
    scheduled = compare(workload, ["stock", "onnxruntime"], opts.target, "untuned", opts.threads,
                        min_runs=opts.runs, progress=False)
    tvm_row, ort_row = scheduled.rows
    row = {"model": model, "args": zoo.parse_model_args(model, args), "untuned_ms": tvm_row.latency_ms,
           "onnxruntime_ms": ort_row.latency_ms, "ratio_vs_onnxruntime": tvm_row.latency_ms / ort_row.latency_ms,
           "untuned_compile_s": tvm_row.compile_s, "max_abs_err": tvm_row.max_abs_err,
           "unscheduled_ms": None, "speedup_vs_unscheduled": None}
    if opts.unscheduled_runs > 0:
        naive = compare(workload, ["stock"], opts.target, "unscheduled", opts.threads,
                        min_runs=opts.unscheduled_runs, warmup=1, progress=False).rows[0]
        row["unscheduled_ms"] = naive.latency_ms
        row["speedup_vs_unscheduled"] = naive.latency_ms / tvm_row.latency_ms
    row["wall_s"] = time.perf_counter() - start
    return row


def table(rows: list[dict]) -> str:
    header = ("model", "args", "untuned ms", "unscheduled ms", "ONNX Runtime ms", "speedup vs unscheduled",
              "untuned / ORT")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["model"], " ".join(f"{k}={v}" for k, v in row["args"].items()), _fmt(row["untuned_ms"]),
                 _fmt(row["unscheduled_ms"]), _fmt(row["onnxruntime_ms"]),
                 _fmt(row["speedup_vs_unscheduled"], "x"), _fmt(row["ratio_vs_onnxruntime"], "x")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def main(argv=None) -> int:
    opts = parse_args(argv)
    models = [m.strip() for m in opts.models.split(",") if m.strip()]
    try:
        unknown = [m for m in models if m not in zoo.MODELS]
        if unknown:
            raise ValueError(f"unknown zoo model(s) {', '.join(unknown)}; zoo: {', '.join(zoo.model_names())}")
        grouped = model_args(models, opts.model_arg)
        rows = [bench_model(model, grouped[model], opts) for model in models]
    except ValueError as err:
        print(f"bench_schedule: {err}", file=sys.stderr)
        return 2
    machine = machine_description(configure_threads(opts.threads))
    print(f"stock fusion; untuned = default TIR schedule; target {opts.target}; {machine}\n")
    print(table(rows))
    if opts.json:
        with open(opts.json, "w") as out:
            json.dump({"machine": machine, "target": opts.target, "rows": rows}, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Full-size CPU benchmark: every strategy against PyTorch and ONNX Runtime, with the time split
of the best TVM row into contractions and the rest, and achieved / peak FLOP rate per class.

    .venv/bin/python scripts/bench_cpu.py                                  # the default matrix
    .venv/bin/python scripts/bench_cpu.py --models vit,resnet50 --batches 1 \\
        --fusion none,stock,apollo,torch,onnxruntime --markdown docs/benchmarks.md

A model is ``name`` or ``name:key=value,key=value`` (zoo arguments, e.g. ``bert_base:seq=512``).
Every (model, batch) is one ``compare()`` run: its rows are timed round-robin over ``--rounds``
rounds, so drift on a shared machine hits every row alike; ratios are read within one run. The
peak is measured once by :func:`fma_peak_gflops`: independent vector FMA chains on every thread.
Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm
from tvm import relax
from tvm.script import tirx as T

from tvm_fusion_ext import fusion_names
from tvm_fusion_ext.driver.build import build_with_phases
from tvm_fusion_ext.driver.evaluation import (
    DEFAULT_REFERENCE_ROWS,
    REFERENCE_ROWS,
    compare,
    configure_threads,
    load_workload,
    machine_description,
    parse_model_spec,
    parse_target,
    speedup,
)
from tvm_fusion_ext.driver.kernel_times import BUILTINS, called_kernels, contractions, kernel_times
from tvm_fusion_ext.driver.markdown import replace_section
from tvm_fusion_ext.hardware import spec_for_target

DEFAULT_MODELS = "vit,resnet50,mobilenet_v2,efficientnet_b0,bert_base,bert_base:seq=512"
SECTION_BEGIN, SECTION_END = "<!-- bench_cpu:begin -->", "<!-- bench_cpu:end -->"
# Independent accumulators of the FMA microbenchmark: enough to hide the FMA latency on any x86.
FMA_CHAINS = 12
FMA_STEPS = 200_000


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"default: {DEFAULT_MODELS}")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    parser.add_argument("--fusion", default=",".join(["none", *fusion_names()[1:], *DEFAULT_REFERENCE_ROWS]),
                        help="rows (default: every strategy, torch, onnxruntime)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--json", help="write every report here")
    parser.add_argument("--markdown", help="replace the bench_cpu section of this file (e.g. docs/benchmarks.md)")
    return parser.parse_args(argv)


def workloads(models: str, batches: list[int]):
    """``(label, zoo name, zoo arguments)`` for every model and batch."""
    for item in models.split(","):
        name, extra = parse_model_spec(item)
        for batch in batches:
            args = [*extra, f"batch={batch}"]
            yield f"{name} ({', '.join(args)})", name, args


def fma_peak_gflops(target: tvm.target.Target, threads: int) -> float:
    """FP32 FLOP/s of ``FMA_CHAINS`` independent vector FMA chains per thread, all threads busy."""
    lanes = spec_for_target(target).vector_lanes("float32")
    width = FMA_CHAINS * lanes

    @T.prim_func(s_tir=True)
    def fma(a: T.Buffer((threads, width), "float32")):
        T.func_attr({"global_symbol": "fma", "tirx.noalias": True})
        for t in T.parallel(threads):
            acc = T.alloc_buffer((width,), "float32", scope="local")
            for j in T.vectorized(width):
                acc[j] = a[t, j]
            for _ in range(FMA_STEPS):
                for c in T.unroll(FMA_CHAINS):
                    for lane in T.vectorized(lanes):
                        acc[c * lanes + lane] = acc[c * lanes + lane] * T.float32(0.999999) + T.float32(1e-6)
            for j in T.vectorized(width):
                a[t, j] = acc[j]

    lib = tvm.tirx.build(fma, target)
    data = tvm.runtime.tensor(np.ones((threads, width), "float32"))
    seconds = lib.time_evaluator("fma", tvm.cpu(), number=3, repeat=3)(data).min
    return 2 * threads * width * FMA_STEPS / seconds / 1e9


def kernel_split(workload, fusion: str, target) -> dict:
    """Per-kernel time of ``fusion``'s build: contractions vs the rest, and the FLOP rate of the
    contractions. The scheduled kernels are matched to the fused ones by call order (scheduling
    renames some: ``SplitLayoutRewritePreproc`` adds ``_prepacked``)."""
    executable, fused_mod, scheduled_mod = build_with_phases(workload.mod, fusion, target)
    fused_contractions = contractions(fused_mod)
    flops = {}
    for scheduled, fused in zip(called_kernels(scheduled_mod), called_kernels(fused_mod)):
        if fused in fused_contractions:
            flops[scheduled] = fused_contractions[fused]
    vm = relax.VirtualMachine(executable, tvm.cpu())
    times = kernel_times(vm, [tvm.runtime.tensor(x) for x in workload.inputs], tvm.cpu(), runs=10)
    split = {"contraction_ms": 0.0, "other_ms": 0.0, "builtins_ms": 0.0, "contraction_gflop": 0.0,
             "classes": {}}
    for entry in times:
        if entry.name == BUILTINS:
            split["builtins_ms"] += entry.ms_per_run
        elif entry.name in flops:
            work, kind = flops[entry.name]
            gflop = work * entry.calls_per_run / 1e9
            split["contraction_ms"] += entry.ms_per_run
            split["contraction_gflop"] += gflop
            per_class = split["classes"].setdefault(kind, {"ms": 0.0, "gflop": 0.0})
            per_class["ms"] += entry.ms_per_run
            per_class["gflop"] += gflop
        else:
            split["other_ms"] += entry.ms_per_run
    split["contraction_gflops"] = split["contraction_gflop"] / (split["contraction_ms"] / 1e3 or 1)
    return split


def _speedup(base: dict, row: dict) -> float:
    """``row``'s speed-up over ``base`` (reported rows of one run, per-round ratios)."""
    return speedup(base["latency_ms"], row["latency_ms"], base.get("latency_rounds_ms"),
                   row.get("latency_rounds_ms"))


def markdown(results: list[dict], peak: float, command: str, machine: str, commit: str) -> str:
    lines = [SECTION_BEGIN, "## Full-size models on the CPU (`scripts/bench_cpu.py`)", "",
             f"Commit `{commit}`, {machine}; FMA peak {peak:.0f} GFLOP/s (fp32, all threads).", "",
             f"<sub>`{command}`</sub>", ""]
    for result in results:
        rows = result["rows"]
        tvm_rows = [r for r in rows if r["fusion"] not in REFERENCE_ROWS]
        best = min(tvm_rows, key=lambda r: r["latency_ms"])
        lines += [f"### {result['label']}", "",
                  "| row | kernels | latency ms | vs stock | best TVM / row |",
                  "|---|---:|---:|---:|---:|"]
        for r in rows:
            vs_stock = f"{r['speedup_vs_stock']:.2f}x" if r.get("speedup_vs_stock") else "-"
            lines.append(f"| {r['fusion']} | {r.get('kernels') or '-'} | {r['latency_ms']:.3f} | {vs_stock} | "
                         f"{_speedup(best, r):.2f} |")
        split = result["split"]
        total = split["contraction_ms"] + split["other_ms"] + split["builtins_ms"]
        lines += ["", f"Best TVM row `{best['fusion']}`"
                  + "".join(f"; {r['fusion']} / best = {_speedup(r, best):.2f}x"
                            for r in rows if r["fusion"] in REFERENCE_ROWS)
                  + f". Its kernels (profiled, {total:.2f} ms): contractions {split['contraction_ms']:.2f} ms "
                  f"at {split['contraction_gflops']:.0f} GFLOP/s ({split['contraction_gflops'] / peak:.0%} of "
                  f"peak), other kernels {split['other_ms']:.2f} ms, VM builtins {split['builtins_ms']:.2f} ms.", ""]
        if split.get("classes"):
            lines += ["| contraction class | ms | GFLOP/s | of peak |", "|---|---:|---:|---:|"]
            for kind, c in sorted(split["classes"].items(), key=lambda item: -item[1]["ms"]):
                rate = c["gflop"] / (c["ms"] / 1e3 or 1)
                lines.append(f"| {kind} | {c['ms']:.2f} | {rate:.0f} | {rate / peak:.0%} |")
            lines.append("")
    lines.append(SECTION_END)
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = configure_threads(args.threads)
    target = parse_target("llvm")
    fusions = [f.strip() for f in args.fusion.split(",") if f.strip()]
    peak = fma_peak_gflops(target, threads)
    print(f"FMA peak: {peak:.0f} GFLOP/s on {threads} threads", flush=True)
    results = []
    for label, model, model_args in workloads(args.models, [int(b) for b in args.batches.split(",")]):
        start = time.time()
        try:
            workload = load_workload(model, model_args)
            report = compare(workload, fusions, target, "untuned", threads=threads, rounds=args.rounds)
            rows = [row.to_json() for row in report.rows]
            best = min((r for r in rows if r["fusion"] not in REFERENCE_ROWS), key=lambda r: r["latency_ms"])
            split = kernel_split(workload, best["fusion"], target)
        except Exception as err:  # noqa: BLE001 - one failing model must not lose the others' rows
            print(f"\n{label}: failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}", flush=True)
            continue
        print(f"\n{label} ({time.time() - start:.0f} s)\n{report.table()}", flush=True)
        totals = {k: round(v, 3) for k, v in split.items() if k != "classes"}
        classes = {k: {"ms": round(c["ms"], 3), "gflops": round(c["gflop"] / (c["ms"] / 1e3 or 1))}
                   for k, c in split["classes"].items()}
        print(f"best {best['fusion']}: {json.dumps(totals)}; by class {json.dumps(classes)}", flush=True)
        results.append({"label": label, "rows": rows, "split": split})
    command = "python scripts/bench_cpu.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = machine_description(threads)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peak_gflops": peak, "machine": machine, "commit": commit, "date":
                       datetime.date.today().isoformat(), "results": results}, f, indent=1)
    if args.markdown:
        replace_section(args.markdown, markdown(results, peak, command, machine, commit), SECTION_BEGIN, SECTION_END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

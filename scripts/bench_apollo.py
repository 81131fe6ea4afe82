#!/usr/bin/env python
"""APOLLO's Table 3 ablation in one run: stock vs APOLLO with Layer II / Layer III disabled.

    .venv/bin/python scripts/bench_apollo.py                         # full shapes, untuned, timed
    .venv/bin/python scripts/bench_apollo.py --kernels-only          # kernels and bytes only (no compile)
    .venv/bin/python scripts/bench_apollo.py --cases apollo_fig3,multi_head --runs 5 --json /tmp/a.json

For each case (BERT-base, the Fig. 5 / Fig. 6 sub-graphs of the zoo, ResNet-50) every strategy of
``--fusion`` is measured with :func:`tvm_fusion_ext.driver.evaluation.compare` (kernels per inference,
bytes crossing kernel boundaries, compile seconds, median latency, error against PyTorch) under
one scheduling policy. The markdown table has Table 3's columns: latency of each strategy, the
improvement of full APOLLO over stock, and the improvements of Layer II (``apollo-no-stitch`` ->
``apollo-no-parallel``) and Layer III (``apollo-no-parallel`` -> ``apollo``). ``--kernels-only``
skips compiling and timing (kernels and bytes are deterministic: the fusion stage only).
Run the timed version on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_zoo import _cell, model_args

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.evaluation import compare, load_workload, machine_description, parse_fusions

CASES = ("bert_base", "apollo_fig3", "layernorm_chain", "softmax_chain", "multi_head", "multi_tail",
         "resnet50")
STRATEGIES = ("stock", "apollo-no-stitch", "apollo-no-parallel", "apollo")
# (label, partial strategy, full strategy) of Table 3's "improvement" columns.
LAYER_GAINS = (("Layer II", "apollo-no-stitch", "apollo-no-parallel"),
               ("Layer III", "apollo-no-parallel", "apollo"))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated zoo models")
    parser.add_argument("--fusion", default=",".join(STRATEGIES), help="strategies (rows of each case)")
    parser.add_argument("--model-arg", action="append", default=[], metavar="MODEL:KEY=VALUE",
                        help="override one zoo argument of one case (repeatable), e.g. bert_base:layers=2")
    parser.add_argument("--policy", default="untuned", choices=("unscheduled", "untuned", "tuned"))
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--threads", type=int, default=None, help="default: every logical CPU")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per row and round (at least)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timing rounds, rows in turn; a row's latency is its median round")
    parser.add_argument("--kernels-only", action="store_true",
                        help="kernels and boundary bytes only: no compile, no timing")
    parser.add_argument("--json", default=os.path.join(ROOT, "docs", "benchmarks", "apollo_ablation.json"),
                        help="where the JSON report goes")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in zoo.MODELS]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; zoo: {', '.join(zoo.model_names())}")
    try:
        args.fusion = parse_fusions(args.fusion)
    except ValueError as err:
        parser.error(str(err))
    args.per_model = model_args(args)
    return args


def kernel_rows(workload, fusions: list[str], target: str) -> list[dict]:
    """Kernels and boundary bytes of each strategy's fusion stage (what ``compare`` reports)."""
    from tvm_fusion_ext.analysis.kernel_traffic import kernel_traffic
    from tvm_fusion_ext.driver.evaluation import parse_target
    from tvm_fusion_ext.pipelines import fusion_pipeline

    target = parse_target(target)
    rows = []
    for name in fusions:
        with target:
            traffic = kernel_traffic(fusion_pipeline(name, target)(workload.mod))
        rows.append({"fusion": name, "kernels": traffic.kernels, "boundary_bytes": traffic.boundary_bytes})
    return rows


def _gain(rows: dict, slow: str, fast: str) -> float | None:
    """Table 3's improvement of ``fast`` over ``slow``: ``slow / fast - 1`` in latency."""
    a, b = rows.get(slow, {}).get("latency_ms"), rows.get(fast, {}).get("latency_ms")
    return a / b - 1 if a and b else None


def markdown(cases: dict[str, dict], fusions: list[str], timed: bool) -> str:
    """Two tables: kernels / boundary MB per strategy, and (timed) Table 3's latency columns."""
    lines = ["| case | " + " | ".join(f"{f} kernels" for f in fusions) + " | "
             + " | ".join(f"{f} MB" for f in fusions) + " |",
             "|---|" + "---:|" * (2 * len(fusions))]
    for case, report in cases.items():
        rows = {r["fusion"]: r for r in report["rows"]}
        lines.append(f"| {case} | " + " | ".join(_cell(rows[f]["kernels"], "d") for f in fusions) + " | "
                     + " | ".join(_cell(rows[f]["boundary_bytes"] / 1e6, ".2f") for f in fusions) + " |")
    if not timed:
        return "\n".join(lines)
    gains = [(label, a, b) for label, a, b in LAYER_GAINS if a in fusions and b in fusions]
    full = "apollo" if "apollo" in fusions and "stock" in fusions else None
    head = [f"{f} ms" for f in fusions] + (["apollo vs stock"] if full else []) + [g[0] for g in gains]
    lines += ["", "| case | " + " | ".join(head) + " | max abs err |", "|---|" + "---:|" * (len(head) + 1)]
    for case, report in cases.items():
        rows = {r["fusion"]: r for r in report["rows"]}
        cells = [_cell(rows[f]["latency_ms"], ".3f") for f in fusions]
        if full:
            cells.append(_cell(_gain(rows, "stock", "apollo"), "+.0%"))
        cells += [_cell(_gain(rows, a, b), "+.0%") for _, a, b in gains]
        cells.append(_cell(max(r["max_abs_err"] for r in rows.values()), ".1e"))
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    cases, started = {}, time.time()
    machine = None
    for case in args.cases:
        assignments = args.per_model.get(case, [])
        workload = load_workload(case, assignments)
        t0 = time.time()
        if args.kernels_only:
            report = {"model": case, "rows": kernel_rows(workload, args.fusion, args.target)}
        else:
            result = compare(workload, args.fusion, target=args.target, policy=args.policy,
                             threads=args.threads, min_runs=args.runs, progress=False,
                             rounds=args.rounds)
            machine = result.machine
            report = result.to_json()
        report["args"] = zoo.parse_model_args(case, assignments)
        report["seconds"] = round(time.time() - t0, 1)
        cases[case] = report
        print(f"{case}: {report['seconds']:.0f} s", file=sys.stderr, flush=True)
    table = markdown(cases, args.fusion, timed=not args.kernels_only)
    data = {"policy": None if args.kernels_only else args.policy, "target": args.target,
            "machine": machine or machine_description(args.threads or os.cpu_count()),
            "command": " ".join([".venv/bin/python", "scripts/bench_apollo.py", *argv]),
            "seconds": round(time.time() - started, 1), "cases": cases, "markdown": table}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as out:
        json.dump(data, out, indent=2)
        out.write("\n")
    print(table)
    print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

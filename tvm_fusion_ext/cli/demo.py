"""``tvm-fusion demo``: what ``make demo`` runs - fusion strategies on one embedded model, on this
CPU and on the DSA simulator, and a drawing of the fastest strategy's groups.

    tvm-fusion demo                        # softmax_chain (APOLLO Fig. 5), into build/demo/
    tvm-fusion demo --model layernorm_chain --out-dir /tmp/demo

Three steps, each printed as it finishes:

1. ``compare`` on the CPU (``llvm``): ``none`` (no fusion), ``stock`` (TVM's FuseOps) and the
   papers' strategies, with PyTorch and ONNX Runtime as reference rows, timed round-robin;
   the latencies are drawn to ``latency.svg``;
2. the same strategies compiled for ``dsa/stcp920`` and run through the simulator: cycles, DDR
   traffic and DDR buffers per strategy (deterministic, so one round);
3. ``explain`` of the fastest strategy on the CPU, drawn to ``<strategy>.svg``.

The measuring lives in :mod:`tvm_fusion_ext.driver.evaluation`; this module only chooses the rows
and prints.
"""

from __future__ import annotations

import argparse
import os
import sys

HELP = "fusion strategies on one embedded model: CPU latency, DSA simulation, drawing of the best"
DEFAULT_MODEL = "softmax_chain"
STRATEGIES = ("none", "stock", "dominator-both", "apollo", "neoflow", "graphturbo")
DSA_TARGET = "dsa/stcp920"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("demo", help=HELP, description=HELP)
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"zoo model name (default {DEFAULT_MODEL}: APOLLO Fig. 5's scale, mask, "
                             "softmax and gating chain over 12 heads)")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="zoo model argument (repeatable)")
    parser.add_argument("--out-dir", default=os.path.join("build", "demo"),
                        help="where the drawings go (created; default build/demo)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds on the CPU (default 5)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for TVM, PyTorch and ONNX Runtime (default: all logical CPUs)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..driver import evaluation
    from ..driver.latency_chart import latency_svg
    from ..explain import explain
    from ..explain.render_svg import render_svg

    if args.rounds < 1:
        raise ValueError("--rounds must be at least 1")
    os.makedirs(args.out_dir, exist_ok=True)
    evaluation.configure_threads(args.threads)
    workload = evaluation.load_workload(args.model, args.model_arg)

    print(f"[1/3] {workload.name} on this CPU: every strategy, PyTorch and ONNX Runtime, "
          f"{args.rounds} rounds", flush=True)
    cpu = evaluation.compare(workload, [*STRATEGIES, *evaluation.DEFAULT_REFERENCE_ROWS], "llvm", "untuned",
                             threads=args.threads, rounds=args.rounds)
    print(f"machine: {cpu.machine}")
    print(cpu.table())
    chart = os.path.join(args.out_dir, "latency.svg")
    with open(chart, "w", encoding="utf-8") as out:
        out.write(latency_svg(cpu))
    fused = [row for row in cpu.rows if row.fusion in STRATEGIES and row.fusion != "none"]
    best = min(fused, key=lambda row: row.latency_ms)
    by_name = {row.fusion: row for row in cpu.rows}

    def over(base: str) -> float:
        row = by_name[base]
        return evaluation.speedup(row.latency_ms, best.latency_ms, row.latency_rounds_ms,
                                  best.latency_rounds_ms)

    print(f"fastest strategy: {best.fusion}, {over('none'):.2f}x no fusion, {over('stock'):.2f}x stock FuseOps"
          + "".join(f", {over(ref):.2f}x {ref}" for ref in evaluation.REFERENCE_ROWS if ref in by_name)
          + f" (wrote {chart})", flush=True)

    print(f"\n[2/3] the same strategies on {DSA_TARGET}, through the simulator", flush=True)
    dsa = evaluation.compare(workload, list(STRATEGIES), evaluation.parse_target(DSA_TARGET), "untuned")
    print(dsa_table(dsa))
    sys.stdout.flush()

    print(f"\n[3/3] the groups of {best.fusion}", flush=True)
    report = explain(workload.mod, best.fusion, "llvm", workload.name)
    drawing = os.path.join(args.out_dir, f"{best.fusion}.svg")
    with open(drawing, "w", encoding="utf-8") as out:
        out.write(render_svg(report))
    print(report.table())
    print(f"wrote {drawing}")
    return 0


def dsa_table(report) -> str:
    """One line per strategy of a DSA comparison: kernels, simulated cycles, DDR traffic and DDR
    buffers, and the speedup over ``stock`` in cycles."""
    stock = next((row.dsa["cycles"] for row in report.rows if row.fusion == "stock" and row.dsa), None)
    header = f"{'fusion':<16}{'kernels':>8}{'cycles':>14}{'DDR MB':>10}{'DDR buffers':>13}{'vs stock':>10}"
    lines = [header, "-" * len(header)]
    for row in report.rows:
        profile = row.dsa or {}
        cycles = profile.get("cycles")
        ratio = f"{stock / cycles:.2f}x" if stock and cycles else "-"
        lines.append(f"{row.fusion:<16}{profile.get('kernels', '-'):>8}{cycles if cycles is not None else '-':>14}"
                     f"{profile.get('ddr_bytes', 0) / 1e6:>10.2f}{profile.get('buffers', {}).get('ddr', '-'):>13}"
                     f"{ratio:>10}")
    return "\n".join(lines)

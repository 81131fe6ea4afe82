"""``tvm-fusion compare``: one table, one row per fusion strategy, on one model.

    tvm-fusion compare --model resnet18 --fusion none,stock,torch,onnxruntime --json r.json

The measuring lives in :mod:`tvm_fusion_ext.driver.evaluation`; this module only parses and prints.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..pipelines import DEFAULT_POLICY, POLICIES
from .options import add_cost_check_argument, add_cuda_graph_argument, add_model_arguments, cuda_graph_scope

HELP = "compare fusion strategies on one model (kernels, boundary bytes, compile time, latency, error)"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("compare", help=HELP, description=HELP)
    add_model_arguments(parser)
    parser.add_argument("--fusion", default="none,stock",
                        help="comma-separated strategies ('all' = every registered one), plus the reference "
                             "rows torch, torch-compile and onnxruntime (on the target's device: a CUDA "
                             "target runs them on the GPU)")
    parser.add_argument("--target", default="llvm", help="target string or JSON dict")
    add_cost_check_argument(parser)
    add_cuda_graph_argument(parser)
    parser.add_argument("--policy", choices=POLICIES, default=DEFAULT_POLICY,
                        help="scheduling policy, the same for every strategy")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument("--plot", metavar="FILE.svg", help="also draw the latencies as an SVG bar chart")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for TVM, PyTorch and ONNX Runtime (default: all logical CPUs)")
    parser.add_argument("--runs", type=int, default=20, help="minimum timed runs per row and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of timing; within a round the rows take turns of a few calls each, "
                             "so drift slows every row alike; a row's latency is the median of its "
                             "round medians (default 3)")
    parser.add_argument("--trials", type=int, default=32,
                        help="MetaSchedule trials per task under --policy tuned")
    parser.add_argument("--work-dir", default=None,
                        help="tuning databases under --policy tuned (one sub-directory per strategy)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..driver import evaluation

    if args.runs < 20:
        raise ValueError("--runs must be at least 20")
    if args.rounds < 1:
        raise ValueError("--rounds must be at least 1")
    if args.plot and not os.path.isdir(os.path.dirname(os.path.abspath(args.plot))):
        raise ValueError(f"--plot {args.plot}: directory {os.path.dirname(os.path.abspath(args.plot))} "
                         "does not exist")
    fusions = evaluation.parse_fusions(args.fusion)
    target = evaluation.parse_target(args.target)
    graphs = cuda_graph_scope(args.cuda_graph, target)
    evaluation.configure_threads(args.threads)
    workload = evaluation.load_workload(args.model, args.model_arg, args.importer)
    with graphs:
        report = evaluation.compare(workload, fusions, target, args.policy, threads=args.threads,
                                    min_runs=args.runs, trials_per_task=args.trials, work_dir=args.work_dir,
                                    rounds=args.rounds, cost_check=args.cost_check)
    print(f"model {report.model} ({workload.importer} import), policy {report.policy}, target {args.target}, "
          f"reference {workload.reference}")
    print(f"machine: {report.machine}")
    print(report.table())
    spreads = [f"{row.fusion} {_spread(row.latency_rounds_ms):.1%}" for row in report.rows if row.latency_rounds_ms]
    if spreads:
        print(f"spread of the {args.rounds} round medians ((max - min) / median): " + ", ".join(spreads))
    sys.stdout.flush()
    if args.json:
        report.write_json(args.json)
    if args.plot:
        from ..driver.latency_chart import latency_svg

        with open(args.plot, "w") as out:
            out.write(latency_svg(report))
        print(f"wrote {args.plot}")
    return 0


def _spread(values: list[float]) -> float:
    ordered = sorted(values)
    return (ordered[-1] - ordered[0]) / ordered[len(ordered) // 2]

"""``tvm-fusion explain``: draw a strategy's fusion groups and print one line per kernel.

    tvm-fusion explain resnet18 --fusion apollo --out groups.svg --dot groups.dot

The analysis lives in :mod:`tvm_fusion_ext.explain`; this module only parses, writes and prints.
"""

from __future__ import annotations

import argparse
import os

from .options import add_model_arguments

HELP = "draw a fusion strategy's groups (SVG, DOT) and print a per-group table"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("explain", help=HELP, description=HELP)
    add_model_arguments(parser)
    parser.add_argument("--fusion", required=True, help="fusion strategy (tvm_fusion_ext.fusion_names())")
    parser.add_argument("--out", required=True, metavar="SVG", help="SVG drawing to write")
    parser.add_argument("--dot", metavar="DOT", help="also write the graph as Graphviz DOT text")
    parser.add_argument("--target", default="llvm", help="target string or JSON dict (default llvm)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..driver import evaluation
    from ..explain import explain
    from ..explain.render_dot import render_dot
    from ..explain.render_svg import render_svg
    from ..pipelines import get_strategy

    # Mistakes fail before the model is imported and compiled.
    get_strategy(args.fusion)
    evaluation.parse_target(args.target)
    for path in (args.out, args.dot):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            raise ValueError(f"cannot write {path}: no such directory {folder}")
    workload = evaluation.load_workload(args.model, args.model_arg, args.importer)
    report = explain(workload.mod, args.fusion, args.target, workload.name)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(render_svg(report))
    if args.dot:
        with open(args.dot, "w", encoding="utf-8") as f:
            f.write(render_dot(report))
    print(report.table())
    print(f"wrote {args.out}" + (f" and {args.dot}" if args.dot else ""))
    return 0


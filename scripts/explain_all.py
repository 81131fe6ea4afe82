#!/usr/bin/env python
"""Run ``tvm-fusion explain`` for every strategy on ResNet-18 and BERT and check each drawing.

    .venv/bin/python scripts/explain_all.py                          # ResNet-18 224x224, BERT 2 layers
    .venv/bin/python scripts/explain_all.py --models bert_base --model-arg bert_base:seq=32 --out-dir /tmp/ex

For every (model, strategy) it writes ``<out-dir>/<model>/<strategy>.svg`` and ``.dot``, checks them
with :func:`tvm_fusion_ext.explain.check.check_report` (one box per kernel ``FuseTIR`` makes, the
same boundary bytes, the SVG parses, one DOT cluster per fused group), prints a markdown table and
writes ``<out-dir>/explain_all.json``. The shared pre-processing runs once per model. Exit status 1
when any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tvm_fusion_ext import fusion_names, zoo
from tvm_fusion_ext.driver.evaluation import load_workload, parse_target
from tvm_fusion_ext.explain import explain, prefusion
from tvm_fusion_ext.explain.check import check_report

DEFAULT_ARGS = ["bert_base:layers=2"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,bert_base",
                        help="comma-separated zoo models or model files")
    parser.add_argument("--fusion", default=",".join(fusion_names()), help="comma-separated strategies")
    parser.add_argument("--model-arg", action="append", default=None, metavar="MODEL:KEY=VALUE",
                        help=f"zoo argument of one model (repeatable; default {' '.join(DEFAULT_ARGS)})")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out-dir", default="explain_out", help="drawings and explain_all.json go here")
    return parser.parse_args(argv)


def model_args(items: list[str]) -> dict[str, list[str]]:
    per_model: dict[str, list[str]] = {}
    for item in items:
        model, sep, assignment = item.partition(":")
        if not sep or model not in zoo.MODELS:
            raise SystemExit(f"explain_all.py: error: --model-arg {item!r} is not MODEL:KEY=VALUE "
                             "with a zoo model")
        zoo.parse_model_args(model, [assignment])
        per_model.setdefault(model, []).append(assignment)
    return per_model


def main(argv=None) -> int:
    args = parse_args(argv)
    per_model = model_args(DEFAULT_ARGS if args.model_arg is None else args.model_arg)
    target = parse_target(args.target)
    rows = []
    for model in args.models.split(","):
        workload = load_workload(model, per_model.get(model))
        name = os.path.splitext(os.path.basename(workload.name))[0]
        os.makedirs(os.path.join(args.out_dir, name), exist_ok=True)
        start = time.perf_counter()
        base = prefusion(workload.mod, "none", target)
        print(f"{name}: shared pre-processing {time.perf_counter() - start:.1f} s", file=sys.stderr)
        for fusion in args.fusion.split(","):
            start = time.perf_counter()
            report = explain(workload.mod, fusion, args.target, name, base=base)
            seconds = time.perf_counter() - start
            try:
                svg, dot = check_report(report)
                check = "ok"
            except AssertionError as err:
                svg, dot, check = None, None, f"FAILED {err}"
            for text, ext in ((svg, "svg"), (dot, "dot")):
                if text is not None:
                    path = os.path.join(args.out_dir, name, f"{fusion}.{ext}")
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(text)
            rows.append({"model": name, "model_args": per_model.get(model, []), "fusion": fusion,
                         "kernels": report.kernels, "fused": sum(g.fused for g in report.groups),
                         "boundary_bytes": report.boundary_bytes,
                         "kept_bytes": sum(g.kept_bytes for g in report.groups),
                         "explain_s": round(seconds, 2), "check": check})
            print(f"{name} {fusion}: {report.kernels} kernels, {seconds:.1f} s, {check}", file=sys.stderr)
    print("| model | fusion | kernels | fused | boundary bytes | kept on chip | explain s | check |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['fusion']} | {r['kernels']} | {r['fused']} | {r['boundary_bytes']} | "
              f"{r['kept_bytes']} | {r['explain_s']} | {r['check']} |")
    with open(os.path.join(args.out_dir, "explain_all.json"), "w", encoding="utf-8") as f:
        json.dump({"target": args.target, "rows": rows}, f, indent=1)
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

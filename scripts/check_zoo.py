#!/usr/bin/env python
"""Check that every zoo model compiles under given strategies and targets and matches PyTorch.

    .venv/bin/python scripts/check_zoo.py --fusion graphturbo --targets llvm,dsa/stcp920
    .venv/bin/python scripts/check_zoo.py --models vit,dlrm --fusion stock,graphturbo --json out.json

Each model runs at ``zoo.SMALL_ARGS`` (the test suite's shapes), imported through ``torch``; a row
passes when the compiled outputs are within ``--tol`` of PyTorch eager, relative to each output's
largest magnitude. Prints one line per (model, target, strategy) as it finishes, then a markdown
table; exits 1 if any row failed. A DSA target runs its kernels' C code on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.testing import verify


def check(name: str, targets: list[str], fusions: list[str], tol: float) -> list[dict]:
    """Rows ``{model, target, fusion, error, seconds, ok, failure}`` of one model."""
    model = zoo.load(name, zoo.SMALL_ARGS[name])
    expected = model.reference_outputs()
    with tvm.target.Target("llvm"):
        mod = tvm.transform.Sequential(preprocess_passes())(model.relax("torch"))
    rows = []
    for target in targets:
        for fusion in fusions:
            start = time.time()
            row = {"model": name, "target": target, "fusion": fusion}
            try:
                actual = verify.run(verify.build(mod, fusion, target), model.numpy_inputs())
                row["error"] = verify.max_rel_error(actual, expected)
                row["ok"] = row["error"] < tol
                row["failure"] = "" if row["ok"] else f"relative error {row['error']:.1e}"
            except Exception as err:  # noqa: BLE001  (report the failure, go on with the next row)
                row.update(error=None, ok=False, failure=f"{type(err).__name__}: {str(err)[:200]}")
            row["seconds"] = round(time.time() - start, 1)
            print(f"{name:16s} {target:14s} {fusion:12s} "
                  f"{'ok' if row['ok'] else 'FAIL'} {row['failure']} ({row['seconds']} s)", flush=True)
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| model | target | strategy | max rel. error vs PyTorch | compile + run s | result |",
             "|---|---|---|---:|---:|---|"]
    for r in rows:
        error = "-" if r["error"] is None else f"{r['error']:.1e}"
        lines.append(f"| {r['model']} | {r['target']} | {r['fusion']} | {error} | {r['seconds']} | "
                     f"{'ok' if r['ok'] else r['failure']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.model_names()), help="comma-separated zoo models")
    parser.add_argument("--targets", default="llvm,dsa/stcp920", help="comma-separated targets")
    parser.add_argument("--fusion", default="graphturbo", help="comma-separated strategies")
    parser.add_argument("--tol", type=float, default=1e-4, help="largest relative error allowed")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(zoo.model_names()))
    if unknown:
        parser.error(f"unknown zoo models: {', '.join(unknown)}")
    rows = []
    for name in args.models.split(","):
        rows += check(name, args.targets.split(","), args.fusion.split(","), args.tol)
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Every strategy against ``stock`` on a DSA target, with and without the profitability check.

    PYTHONPATH=. .venv/bin/python scripts/bench_dsa_strategies.py --small
    PYTHONPATH=. .venv/bin/python scripts/bench_dsa_strategies.py --models resnet50,vit --onnx /tmp/ext.onnx

For each zoo model (at ``zoo.SMALL_ARGS`` with ``--small``, else at its default, full-size
arguments) and each ``.onnx`` file given, every strategy is compiled for the target up to its
scheduled kernels and simulated (:func:`~tvm_fusion_ext.driver.static_profile.static_profile`:
deterministic cycles, no run), once as the pipeline builds it (the strategies consult the
profitability check, which on a DSA simulates each candidate kernel:
``tvm_fusion_ext/cost/dsa_model.py``) and once with ``--no-cost-check``'s decisions (the papers'
rules alone). Printed per model: cycles, kernels, compile seconds and the ratio to ``stock``
(above 1: faster than ``stock``). The compile seconds are wall-clock: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.evaluation import load_workload
from tvm_fusion_ext.driver.static_profile import static_profile

STRATEGIES = "stock,dominator-backward,dominator-both,apollo,apollo-no-parallel,apollo-no-stitch,neoflow"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.model_names()),
                        help="comma-separated zoo models ('' for none)")
    parser.add_argument("--onnx", action="append", default=[], metavar="FILE",
                        help="an ONNX model from outside the zoo (repeatable)")
    parser.add_argument("--small", action="store_true", help="zoo models at zoo.SMALL_ARGS")
    parser.add_argument("--fusion", default=STRATEGIES, help="comma-separated strategies (stock first)")
    parser.add_argument("--target", default="dsa/stcp920")
    parser.add_argument("--json", help="write every row as JSON")
    return parser.parse_args(argv)


def profile_row(mod, fusion: str, target: str, cost_check: bool) -> dict:
    start = time.perf_counter()
    try:
        prof = static_profile(mod, fusion, target, cost_check=cost_check)
    except Exception as err:  # noqa: BLE001 - a failing strategy is a row, the others still run
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
    return {"cycles": prof["cycles"], "kernels": prof["kernels"],
            "compile_s": round(time.perf_counter() - start, 2)}


def main(argv=None) -> int:
    args = parse_args(argv)
    fusions = [f for f in args.fusion.split(",") if f]
    workloads = [(name, lambda name=name: load_workload(
        name, [f"{k}={v}" for k, v in zoo.SMALL_ARGS[name].items()] if args.small else None).mod)
        for name in filter(None, args.models.split(","))]
    workloads += [(os.path.basename(path), lambda path=path: load_workload(path).mod) for path in args.onnx]
    results: dict = {}
    worst = math.inf
    for name, load in workloads:
        mod = load()
        rows = {}
        for fusion in fusions:
            rows[fusion] = {"checked": profile_row(mod, fusion, args.target, True)}
            if fusion != "stock":
                rows[fusion]["unchecked"] = profile_row(mod, fusion, args.target, False)
        results[name] = rows
        stock = rows.get("stock", {}).get("checked", {}).get("cycles")
        print(f"== {name}")
        for fusion, row in rows.items():
            cells = []
            for mode in ("checked", "unchecked"):
                r = row.get(mode)
                if r is None:
                    continue
                if "error" in r:
                    cells.append(f"{mode}: {r['error']}")
                    continue
                ratio = stock / r["cycles"] if stock else float("nan")
                r["vs_stock"] = round(ratio, 4)
                if mode == "checked" and fusion != "stock":
                    worst = min(worst, ratio)
                cells.append(f"{mode} {r['cycles']:>11d} cyc {r['kernels']:>4d} k {r['compile_s']:>7.1f} s "
                             f"{ratio:5.2f}x")
            print(f"  {fusion:20s} " + " | ".join(cells), flush=True)
    print(f"lowest ratio to stock with the check: {worst:.3f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"target": args.target, "small": args.small, "models": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Simulated DSA throughput of ``stock`` vs ``graphturbo`` (GraphTurbo Fig. 14, Table 3).

For each model: kernels, simulated cycles and throughput (samples/s), and the buffer-scope counts
per level (DDR / GB / LB) reported by the DSA simulator (``tvm_fusion_ext.target_dsa.profile``),
plus GraphTurbo's plan (sub-graphs, instances, chosen order). The Fig. 15 variants are not listed:
instance-level kernels and across-layer instruction scheduling are not implemented yet.

    .venv/bin/python scripts/bench_graphturbo.py --model resnet_stage --arg image=16 --arg channels=16
"""

from __future__ import annotations

import argparse
import json
import time

import tvm

import tvm_fusion_ext  # noqa: F401
from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.relax_passes.graphturbo_fusion import GraphTurboFusion
from tvm_fusion_ext.target_dsa import profile
from tvm_fusion_ext.testing.verify import build, random_inputs


def _plan_summary(mod, target) -> dict:
    fusion = GraphTurboFusion()
    with target:
        fusion(tvm.transform.Sequential(preprocess_passes())(mod))
    return {"subgraphs": sum(len(p.grouping.groups) for p in fusion.plans),
            "instances": sum(len(p.instances.instances) for p in fusion.plans),
            "orders": [p.order_kind for p in fusion.plans],
            "lb_peak_bytes": max((p.lb_peak for p in fusion.plans), default=0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--arg", action="append", default=[], help="KEY=VALUE model argument")
    parser.add_argument("--target", default="dsa/stcp920")
    args = parser.parse_args()
    target = tvm.target.Target(args.target)
    rows = []
    for name in args.model:
        model_args = zoo.parse_model_args(name, args.arg)
        mod = zoo.load(name, model_args).relax("torch")
        inputs = random_inputs(mod["main"])
        batch = int(model_args.get("batch", 1))
        row = {"model": name, "args": model_args, "plan": _plan_summary(mod, target)}
        for fusion in ("stock", "graphturbo"):
            start = time.time()
            prof = profile(build(mod, fusion, target), inputs, target)
            row[fusion] = {"kernels": prof["kernels"], "cycles": prof["cycles"],
                           "throughput": batch / (prof["time_ms"] / 1e3),
                           "buffers": prof["buffers"], "compile_run_s": round(time.time() - start, 1)}
        row["speedup"] = row["stock"]["cycles"] / row["graphturbo"]["cycles"]
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

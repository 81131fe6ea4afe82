#!/usr/bin/env python
"""Compile time of full-size models with and without the profitability check, cold and warm.

    .venv/bin/python scripts/bench_compile_time.py --models vit,resnet50 --fusion neoflow,apollo

Each compile runs in a fresh Python process and times ``driver.build.build`` alone. A model and
strategy start from an empty cache directory (``TVM_FUSION_EXT_CACHE``) that holds only this
host's calibration, copied from the user's cache. The three compiles run in this order: without
the check, with the check on that cold cache, with the check again (the warm second compile).
With ``--rounds N`` the three are repeated N times, each round from a new empty cache, and a row
gives the median seconds and the median of the per-round ratios (a single compile on this
2-core host varies by more than the bounds). The ratios are those of the profitability issue's
targets (cold at most 1.3x, warm at most 1.05x of the compile without the check). Run it on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Files of the user's cache that describe the host, not any model: copied into each fresh cache.
CALIBRATION_FILES = ("device_costs.json", "kernel_costs.json")

_CHILD = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from tvm_fusion_ext.driver.build import build
from tvm_fusion_ext.driver.evaluation import load_workload, parse_model_spec, parse_target
name, extra = parse_model_spec({model!r})
mod = load_workload(name, None if os.path.isfile(name) else ["batch=1", *extra]).mod
start = time.perf_counter()
build(mod, {fusion!r}, parse_target("llvm"), "untuned", {cost_check!r})
print(json.dumps(time.perf_counter() - start))
"""


def compile_seconds(model: str, fusion: str, cost_check: bool, cache: str) -> float:
    """Seconds of one ``build`` in a fresh process whose cache directory is ``cache``."""
    code = _CHILD.format(root=ROOT, model=model, fusion=fusion, cost_check=cost_check)
    env = {**os.environ, "TVM_FUSION_EXT_CACHE": cache}
    done = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{model} / {fusion} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_round(model: str, fusion: str, user_cache: str) -> dict:
    """The three compiles of the module docstring, from a new cache holding the host's calibration."""
    with tempfile.TemporaryDirectory(prefix="compile-time-") as cache:
        for name in CALIBRATION_FILES:
            source = os.path.join(user_cache, name)
            if os.path.exists(source):
                shutil.copy(source, cache)
        plain = compile_seconds(model, fusion, False, cache)
        cold = compile_seconds(model, fusion, True, cache)
        warm = compile_seconds(model, fusion, True, cache)
    return {"no_check_s": plain, "cold_s": cold, "warm_s": warm}


def main(argv=None) -> None:
    from tvm_fusion_ext.hardware.device_costs import cache_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet50,vit,bert_base")
    parser.add_argument("--fusion", default="apollo,neoflow,dominator-both,graphturbo")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the three compiles")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    print("| model / strategy | no check s | check, cold s | check, warm s | cold / no check | warm / no check |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for model in args.models.split(","):
        for fusion in args.fusion.split(","):
            rounds = [_one_round(model, fusion, cache_dir()) for _ in range(args.rounds)]
            row = {"model": model, "fusion": fusion, "rounds": rounds,
                   **{key: statistics.median(r[key] for r in rounds) for key in ("no_check_s", "cold_s", "warm_s")},
                   "cold_ratio": statistics.median(r["cold_s"] / r["no_check_s"] for r in rounds),
                   "warm_ratio": statistics.median(r["warm_s"] / r["no_check_s"] for r in rounds)}
            rows.append(row)
            print(f"| {model} / {fusion} | {row['no_check_s']:.2f} | {row['cold_s']:.2f} | {row['warm_s']:.2f} "
                  f"| {row['cold_ratio']:.2f} | {row['warm_ratio']:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()

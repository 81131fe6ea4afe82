"""Simulated DSA throughput of ``stock`` vs ``graphturbo`` and Fig. 15's variants (GraphTurbo
Fig. 14, Fig. 15, Table 3) on the ``dsa/stcp920`` simulator.

For each model and strategy the module is compiled up to the DSA schedule and simulated without
running it (``driver.static_profile.static_profile``: the kernel models of the scheduled TIR and the
kernel calls of ``main``, the same numbers a traced run gives). Reported per strategy: kernels,
cycles, throughput (samples/s), bytes moved per level and the buffer-scope counts per level
(Table 3: kernel outputs and DDR allocations, GB and LB allocations, per inference).

Batch sizes are GraphTurbo Table 2's; images, depths and layer counts are reduced where compile
time forces it (``BENCH`` below; every reduction is printed with the results); ``--full`` measures
Table 2's sizes instead (``FULL``). Results are merged into ``--json`` (one run per model or
strategy is fine), and the markdown tables are printed from the merged file:

    .venv/bin/python scripts/bench_graphturbo.py --models resnet50 --json docs/benchmarks/graphturbo.json
    .venv/bin/python scripts/bench_graphturbo.py --models bert_base --fusions stock,graphturbo
    .venv/bin/python scripts/bench_graphturbo.py --report-only --json docs/benchmarks/graphturbo.json
    .venv/bin/python scripts/bench_graphturbo.py --full --models resnet50 --fusions stock,graphturbo --json full.json

``--unit-rate UNIT=OPS`` measures on a copy of ``stcp920`` whose compute unit ``UNIT`` does
``OPS`` operations per cycle (registered as ``dsa/stcp920-<unit><ops>``): a bound on what mapping
more work to a faster unit could give, e.g. ``--unit-rate vme=256`` runs every convolution and
GEMM the matrix unit does not take at the matrix unit's rate.

Compile times (``compile_s``, wall clock) are with the kernel generator on ``jobs`` worker
processes: one per CPU, or ``TVM_FUSION_EXT_JOBS`` (``tvm_fusion_ext/target_dsa/workers.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

# this checkout's package, not another one an editable install points to
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm_fusion_ext  # noqa: F401  (registers the strategies and the DSA target)
from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.static_profile import static_profile
from tvm_fusion_ext.target_dsa import register_dsa_target
from tvm_fusion_ext.target_dsa.spec import PRESETS
from tvm_fusion_ext.target_dsa.workers import default_jobs

# Fig. 15's bars, first to last, then the reference.
VARIANTS = ("graphturbo-gb", "graphturbo-lb", "graphturbo-instances", "graphturbo")
FUSIONS = ("stock", *VARIANTS)
# model -> (zoo arguments, unit, what differs from GraphTurbo Table 2 / the published model)
BENCH = {
    "resnet50": ({"batch": 64, "image": 64}, "images/s", "224x224 images reduced to 64x64"),
    "bert_base": ({"batch": 32, "seq": 128, "layers": 2}, "sentences/s",
                  "BERT-128 with 2 of its 12 encoder layers"),
    "mobilenet_v2": ({"batch": 128, "image": 64}, "images/s", "224x224 images reduced to 64x64"),
    "dlrm": ({"batch": 1024}, "queries/s", "the zoo's DLRM-like model (26 tables of 1000 x 64)"),
    "vit": ({"batch": 32, "image": 64, "depth": 4}, "images/s",
            "ViT-Ti/16 on 64x64 images (16 patches) with 4 of its 12 layers"),
    "densenet121": ({"batch": 32, "image": 64, "blocks": "2,4,4,2"}, "images/s",
                    "224x224 images reduced to 64x64, dense blocks 6,12,24,16 to 2,4,4,2"),
}
# GraphTurbo Table 2's sizes (``--full``): the zoo's published models at Table 2's batch sizes.
FULL = {
    "resnet50": ({"batch": 64, "image": 224}, "images/s", "Table 2: ResNet-50, 224x224"),
    "bert_base": ({"batch": 32, "seq": 128, "layers": 12}, "sentences/s",
                  "Table 2: BERT-base, 12 layers, sequence 128"),
    "mobilenet_v2": ({"batch": 128, "image": 224}, "images/s", "Table 2: MobileNetV2, 224x224"),
    "dlrm": BENCH["dlrm"],
    "vit": ({"batch": 32, "image": 224, "depth": 12}, "images/s",
            "Table 2: ViT-Ti/16, 224x224 (196 patches), 12 layers"),
    "densenet121": ({"batch": 32, "image": 224, "blocks": "6,12,24,16"}, "images/s",
                    "Table 2: DenseNet-121, 224x224"),
}
TARGET = "dsa/stcp920"


def with_unit_rates(rates: list[str]) -> str:
    """The target of ``stcp920`` with each ``UNIT=OPS`` of ``rates`` applied (registered once)."""
    if not rates:
        return TARGET
    spec = PRESETS[TARGET.removeprefix("dsa/")]
    units = {u.name: u for u in spec.units}
    for item in rates:
        unit, _, ops = item.partition("=")
        if unit not in units or not ops.isdigit() or int(ops) <= 0:
            raise SystemExit(f"--unit-rate {item!r}: expected UNIT=OPS with UNIT one of {sorted(units)}")
        units[unit] = dataclasses.replace(units[unit], ops_per_cycle=int(ops))
    name = "-".join([spec.name, *(item.replace("=", "") for item in rates)])
    register_dsa_target(name, dataclasses.replace(spec, name=name, units=tuple(units.values())))
    return f"dsa/{name}"


def measure(name: str, fusions: list[str], args: dict, target: str = TARGET) -> dict:
    """One model: the static profile of every strategy in ``fusions`` on ``target``."""
    model_args = zoo.parse_model_args(name, [f"{k}={v}" for k, v in args.items()])
    mod = zoo.load(name, model_args).relax("torch")
    batch = int(model_args.get("batch", 1))
    rows = {}
    for fusion in fusions:
        start = time.time()
        prof = static_profile(mod, fusion, target)
        rows[fusion] = {
            "kernels": prof["kernels"], "cycles": prof["cycles"], "time_ms": prof["time_ms"],
            "throughput": batch / (prof["time_ms"] / 1e3),
            "bytes": {level: prof[f"{level}_bytes"] for level in ("ddr", "gb", "lb")},
            "buffers": prof["buffers"], "unit_busy": prof["unit_busy"],
            "compile_s": round(time.time() - start, 1), "jobs": default_jobs()}
        print(f"{name:12s} {fusion:22s} {prof['cycles']:>12d} cycles  buffers {prof['buffers']}  "
              f"({rows[fusion]['compile_s']} s)", flush=True)
    return {"args": model_args, "rows": rows}


def report(results: dict, sizes: dict = BENCH, target: str = TARGET) -> str:
    """Markdown: Fig. 14 (throughput, speedup), Fig. 15 (variants over stock), Table 3; ``sizes``
    (:data:`BENCH` or :data:`FULL`) gives each model's unit and note."""
    lines = [(f"Simulated on `{target}` (`scripts/bench_graphturbo.py`); throughput = batch / "
             "simulated time of one inference."), "",
             "| model | args | unit | stock | graphturbo | speedup | kernels stock / graphturbo |",
             "|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        rows, unit = res["rows"], sizes.get(name, ({}, "samples/s", ""))[1]
        if "stock" in rows and "graphturbo" in rows:
            s, g = rows["stock"], rows["graphturbo"]
            lines.append(f"| {name} | {_args(res['args'])} | {unit} | {s['throughput']:.1f} | "
                         f"{g['throughput']:.1f} | {g['throughput'] / s['throughput']:.2f}x | "
                         f"{s['kernels']} / {g['kernels']} |")
    lines += ["", "Fig. 15 breakdown (speedup over stock):", "",
              "| model | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    for name, res in results.items():
        rows = res["rows"]
        if "stock" in rows:
            cells = [f"{rows['stock']['cycles'] / rows[v]['cycles']:.2f}x" if v in rows else "-"
                     for v in VARIANTS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", ("Table 3 (buffer scopes per inference: DDR = kernel outputs and DDR allocations, "
              "GB / LB = allocations):"), "",
              ("| model | DDR stock | DDR graphturbo | DDR ratio | GB stock | GB graphturbo | "
              "LB stock | LB graphturbo |"), "|---|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        rows = res["rows"]
        if "stock" in rows and "graphturbo" in rows:
            s, g = rows["stock"]["buffers"], rows["graphturbo"]["buffers"]
            lines.append(f"| {name} | {s['ddr']} | {g['ddr']} | {s['ddr'] / max(g['ddr'], 1):.1f}x | "
                         f"{s['gb']} | {g['gb']} | {s['lb']} | {g['lb']} |")
    notes = [f"* {name}: {sizes[name][2]}" for name in results if name in sizes]
    heading = "Sizes:" if sizes is FULL else "Reduced from GraphTurbo Table 2 for compile time:"
    return "\n".join(lines + ["", heading, *notes])


def _args(args: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(args.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated zoo models (default: all)")
    parser.add_argument("--full", action="store_true",
                        help="GraphTurbo Table 2's sizes (FULL) instead of the reduced ones (BENCH)")
    parser.add_argument("--fusions", default=",".join(FUSIONS), help="comma-separated strategies")
    parser.add_argument("--model-arg", action="append", default=[],
                        help="MODEL:KEY=VALUE overriding a benchmark size")
    parser.add_argument("--json", default="graphturbo_bench.json",
                        help="results file, merged with what it already holds")
    parser.add_argument("--report-only", action="store_true", help="print the tables, measure nothing")
    parser.add_argument("--unit-rate", action="append", default=[],
                        help="UNIT=OPS: measure on stcp920 with that unit's operations per cycle")
    args = parser.parse_args()
    target = with_unit_rates(args.unit_rate)
    sizes = FULL if args.full else BENCH
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    if not args.report_only:
        overrides: dict[str, dict] = {}
        for item in args.model_arg:
            model, _, kv = item.partition(":")
            key, _, value = kv.partition("=")
            if not model or not key or not value:
                raise SystemExit(f"--model-arg {item!r} is not MODEL:KEY=VALUE")
            overrides.setdefault(model, {})[key] = value
        for name in filter(None, (args.models or ",".join(sizes)).split(",")):
            if name not in sizes and name not in overrides:
                raise SystemExit(f"no benchmark size for {name!r}; give --model-arg {name}:KEY=VALUE")
            model_args = {**sizes.get(name, ({},))[0], **overrides.get(name, {})}
            res = measure(name, [f for f in args.fusions.split(",") if f], model_args, target)
            old = results.get(name, {})
            if old.get("args") != res["args"]:
                old = {}
            results[name] = {"args": res["args"], "rows": {**old.get("rows", {}), **res["rows"]}}
            path.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(report(results, sizes, target))


if __name__ == "__main__":
    main()

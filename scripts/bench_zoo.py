#!/usr/bin/env python
"""Run ``tvm-fusion compare`` over the model zoo; write ``docs/benchmarks.md`` and one JSON per model.

    .venv/bin/python scripts/bench_zoo.py                        # whole zoo, full shapes, untuned
    .venv/bin/python scripts/bench_zoo.py --models resnet18,lltm --out-dir /tmp/bench

Every model runs in its own ``tvm-fusion compare`` process (the exact command is in the report),
so one failing model is reported and the others still run. The default rows are every registered
fusion strategy plus the ``torch`` and ``onnxruntime`` reference rows. Run it on a quiet machine:
the latencies are wall-clock medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tvm_fusion_ext import fusion_names, zoo
from tvm_fusion_ext.driver.evaluation import DEFAULT_REFERENCE_ROWS, machine_description


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.model_names()),
                        help="comma-separated zoo models (default: the whole zoo)")
    parser.add_argument("--fusion", default=",".join([*fusion_names(), *DEFAULT_REFERENCE_ROWS]),
                        help="rows of every table (default: all registered strategies + torch,onnxruntime)")
    parser.add_argument("--policy", default="untuned", choices=("unscheduled", "untuned", "tuned"))
    parser.add_argument("--import", dest="importer", default="torch", choices=zoo.IMPORTERS)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--model-arg", action="append", default=[], metavar="MODEL:KEY=VALUE",
                        help="override one zoo argument of one model (repeatable), e.g. bert_base:layers=2")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "docs"),
                        help="benchmarks.md goes here, the JSON files under <out-dir>/benchmarks/")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per model")
    return parser.parse_args(argv)


def model_args(args: argparse.Namespace) -> dict[str, list[str]]:
    per_model: dict[str, list[str]] = {}
    for item in args.model_arg:
        model, sep, assignment = item.partition(":")
        if not sep or model not in zoo.MODELS:
            raise SystemExit(f"bench_zoo.py: error: --model-arg {item!r} is not MODEL:KEY=VALUE with a zoo model")
        zoo.parse_model_args(model, [assignment])          # fail now, not an hour in
        per_model.setdefault(model, []).append(assignment)
    return per_model


def run_model(model: str, extra: list[str], args, json_path: str) -> tuple[list[str], dict | None, str]:
    command = [sys.executable, "-m", "tvm_fusion_ext.cli", "compare", "--model", model,
               "--fusion", args.fusion, "--policy", args.policy, "--import", args.importer,
               "--target", args.target, "--threads", str(args.threads), "--json", json_path]
    for assignment in extra:
        command += ["--model-arg", assignment]
    try:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout,
                                check=False)
    except subprocess.TimeoutExpired:
        return command, None, f"timed out after {args.timeout} s"
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return command, None, lines[-1] if lines else f"exit status {result.returncode}"
    with open(json_path) as report:
        return command, json.load(report), ""


def _cell(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def model_table(report: dict) -> list[str]:
    lines = ["| fusion | kernels | boundary MB | compile s | latency ms | max abs err | speedup vs stock |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        boundary = row["boundary_bytes"] / 1e6 if row["boundary_bytes"] is not None else None
        lines.append(f"| {row['fusion']} | {_cell(row['kernels'], 'd')} | {_cell(boundary, '.2f')} | "
                     f"{_cell(row['compile_s'], '.1f')} | {_cell(row['latency_ms'], '.3f')} | "
                     f"{_cell(row['max_abs_err'], '.1e')} | {_cell(row['speedup_vs_stock'], '.2f')} |")
    return lines


def summary_table(results: dict[str, dict | None], fusions: list[str]) -> list[str]:
    lines = ["| model | " + " | ".join(fusions) + " |", "|---|" + "---:|" * len(fusions)]
    for model, report in results.items():
        if report is None:
            lines.append(f"| {model} | " + " | ".join("failed" for _ in fusions) + " |")
            continue
        latency = {row["fusion"]: row["latency_ms"] for row in report["rows"]}
        lines.append(f"| {model} | " + " | ".join(_cell(latency.get(f), ".3f") for f in fusions) + " |")
    return lines


def versions() -> str:
    import onnxruntime
    import torch
    import tvm

    return (f"Python {platform.python_version()}, apache-tvm {tvm.__version__}, torch {torch.__version__}, "
            f"onnxruntime {onnxruntime.__version__}")


def write_markdown(path: str, args, argv: list[str], results: dict, commands: dict, errors: dict,
                   seconds: float) -> None:
    fusions = [f.strip() for f in args.fusion.split(",") if f.strip()]
    machine = next((r["machine"] for r in results.values() if r), machine_description(args.threads))
    text = [
        "# Benchmarks: fusion strategies on the model zoo", "",
        f"Generated by `scripts/bench_zoo.py` on {datetime.date.today().isoformat()} in {seconds / 60:.0f} min.", "",
        "Command (from the repository root):", "", "```bash",
        " ".join(shlex.quote(a) for a in [".venv/bin/python", "scripts/bench_zoo.py", *argv]), "```", "",
        f"* Machine: {machine}.",
        f"* Software: {versions()}.",
        (f"* Target `{args.target}`, scheduling policy `{args.policy}` for every TVM row, models imported "
         f"through `{args.importer}`, full default shapes unless an argument is listed."),
        ("* `latency ms` is the median over 3 rounds of each round's median of at least 20 runs after "
         "warm-up, the rows taking turns within a round; TVM, PyTorch and ONNX Runtime "
         f"use the same {args.threads} threads. `kernels` and `boundary MB` (bytes read and written by "
         "all kernels, per inference) come from the module after fusion; the reference rows have none. "
         "`max abs err` is against PyTorch eager. `speedup vs stock` is the median over the rounds of "
         "stock's latency over the row's."),
        "", "## Summary: latency (ms)", "", *summary_table(results, fusions), ""]
    for model, report in results.items():
        spec = zoo.get_spec(model)
        text += [f"## {model}", "", f"{spec.description}. Arguments: "
                 + ", ".join(f"`{k}={v}`" for k, v in zoo.parse_model_args(model, model_args(args).get(model)).items())
                 + ".", ""]
        text += model_table(report) if report else [f"Failed: `{errors[model]}`"]
        text += ["", "<sub>`" + " ".join(shlex.quote(a) for a in ["tvm-fusion", *commands[model][3:]]) + "`</sub>", ""]
    with open(path, "w") as out:
        out.write("\n".join(text))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in zoo.MODELS]
    if unknown:
        raise SystemExit(f"bench_zoo.py: error: unknown model(s) {unknown}; zoo: {', '.join(zoo.model_names())}")
    extra = model_args(args)
    json_dir = os.path.join(args.out_dir, "benchmarks")
    os.makedirs(json_dir, exist_ok=True)
    from tqdm import tqdm

    results, commands, errors = {}, {}, {}
    start = time.time()
    for model in (bar := tqdm(models, desc="zoo", unit="model")):
        bar.set_postfix_str(model)
        json_path = os.path.join(json_dir, f"{model}.json")
        commands[model], results[model], errors[model] = run_model(model, extra.get(model, []), args, json_path)
        if errors[model]:
            tqdm.write(f"{model}: FAILED: {errors[model]}")
    markdown = os.path.join(args.out_dir, "benchmarks.md")
    write_markdown(markdown, args, argv, results, commands, errors, time.time() - start)
    print(f"wrote {markdown} and {len(results) - sum(map(bool, errors.values()))} JSON files in {json_dir}")
    return 1 if any(errors.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Check that every zoo model compiles under given strategies and targets and matches PyTorch.

    .venv/bin/python scripts/check_zoo.py --fusion graphturbo --targets llvm,dsa/stcp920
    .venv/bin/python scripts/check_zoo.py --models vit,dlrm --fusion stock,graphturbo --json out.json
    .venv/bin/python scripts/check_zoo.py --fusion stock,apollo --targets '{"kind":"cuda","arch":"sm_90"}'

Each model runs at ``zoo.SMALL_ARGS`` (the test suite's shapes), imported through ``torch``; a row
passes when the compiled outputs are within ``--tol`` of PyTorch eager, relative to each output's
largest magnitude. Prints one line per (model, target, strategy) as it finishes, then a markdown
table; exits 1 if any row failed. A DSA target runs its kernels' C code on the host. A target whose
device this machine lacks (a CUDA target without a GPU, or for another architecture than this
machine's GPU) is only built: its rows say "built, not run"; with ``--host-check`` each kernel of
such a build runs on the host CPU instead, its thread loops serial, against the same kernel before
scheduling (``driver.kernel_check``), which catches a wrong schedule though not a race or a GPU
lowering error. ``--fusion all`` names every strategy. Targets are names or JSON dicts,
comma-separated (commas inside a dict do not split). ``--jobs`` checks that many models at once, in
processes of their own (which share the CPUs for the DSA's kernel generator: ``TVM_FUSION_EXT_JOBS``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm

from tvm_fusion_ext import fusion_names, zoo
from tvm_fusion_ext.driver.build import target_device
from tvm_fusion_ext.driver.evaluation import parse_fusions
from tvm_fusion_ext.driver.kernel_check import check_kernels
from tvm_fusion_ext.pipelines import preprocess_passes
from tvm_fusion_ext.target_dsa.workers import JOBS_ENV, default_jobs
from tvm_fusion_ext.testing import verify

BUILT_ONLY = "built, not run (no device for this target here)"


def check(name: str, targets: list[str], fusions: list[str], tol: float, host_check: bool = False) -> list[dict]:
    """Rows ``{model, target, fusion, error, seconds, ok, ran, on_host, failure}`` of one model
    (``ran``: false where the target's device is missing; ``on_host``: its kernels were then
    checked one by one on the host, ``error`` being the worst kernel's)."""
    model = zoo.load(name, zoo.SMALL_ARGS[name])
    expected = model.reference_outputs()
    with tvm.target.Target("llvm"):
        mod = tvm.transform.Sequential(preprocess_passes())(model.relax("torch"))
    rows = []
    for text in targets:
        target = tvm.target.Target(json.loads(text) if text.lstrip().startswith("{") else text)
        label = target_label(target, text)
        device = runnable_device(target)
        for fusion in fusions:
            start = time.time()
            row = {"model": name, "target": label, "fusion": fusion, "on_host": False}
            try:
                if device is None and host_check:
                    row.update(ran=False, on_host=True, **host_checked(mod, fusion, target, tol))
                elif device is None:
                    verify.build(mod, fusion, target)
                    row.update(error=None, ok=True, ran=False, failure="")
                else:
                    executable = verify.build(mod, fusion, target)
                    row["ran"] = True
                    actual = verify.run(executable, model.numpy_inputs(), device=device)
                    row["error"] = verify.max_rel_error(actual, expected)
                    row["ok"] = row["error"] < tol
                    row["failure"] = "" if row["ok"] else f"relative error {row['error']:.1e}"
            except Exception as err:  # noqa: BLE001  (report the failure, go on with the next row)
                row.update(error=None, ok=False, ran=row.get("ran", False),
                           failure=f"{type(err).__name__}: {str(err)[:200]}")
            row["seconds"] = round(time.time() - start, 1)
            status = "FAIL " + row["failure"] if not row["ok"] else result_text(row)
            print(f"{name:16s} {label:14s} {fusion:12s} {status} ({row['seconds']} s)", flush=True)
            rows.append(row)
    return rows


def host_checked(mod, fusion: str, target: tvm.target.Target, tol: float) -> dict:
    """``error``, ``ok`` and ``failure`` of ``fusion``'s kernels for ``target`` run on the host."""
    checks = check_kernels(mod, fusion, target, on_host=True)
    failed = [c for c in checks if c.failure]
    if failed:
        return {"error": None, "ok": False, "failure": f"kernel {failed[0].name}: {failed[0].failure}"}
    worst = max(checks, key=lambda c: c.rel_error)
    ok = worst.rel_error < tol
    return {"error": worst.rel_error, "ok": ok,
            "failure": "" if ok else f"kernel {worst.name}: relative error {worst.rel_error:.1e} on the host"}


def result_text(row: dict) -> str:
    """A passing row's result: run on the device, checked on the host, or only built."""
    if row["ran"]:
        return "ok"
    return "kernels ok on the host (threads serial)" if row.get("on_host") else BUILT_ONLY


def runnable_device(target: tvm.target.Target):
    """The device to run ``target``'s code on, or ``None`` where this machine cannot: no such
    device, or a CUDA GPU of another architecture than the target's (an ``sm_80`` cubin does not
    load on an ``sm_90`` GPU)."""
    try:
        device = target_device(target)
    except ValueError:
        return None
    arch = target.attrs.get("arch") if target.kind.name == "cuda" else None
    if arch and arch != "sm_" + device.compute_version.replace(".", ""):
        return None
    return device


def target_label(target: tvm.target.Target, text: str) -> str:
    """A short name for a row: the text given, or ``kind/arch`` (``kind/mcpu``) for a JSON dict."""
    if not text.lstrip().startswith("{"):
        return text
    detail = target.attrs.get("arch") or target.attrs.get("mcpu")
    return f"{target.kind.name}/{detail}" if detail else target.kind.name


def split_targets(text: str) -> list[str]:
    """``--targets`` split at the commas outside JSON dicts."""
    targets, depth, current = [], 0, ""
    for char in text:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            targets.append(current)
            current = ""
        else:
            current += char
    return [t.strip() for t in [*targets, current] if t.strip()]


def markdown(rows: list[dict]) -> str:
    lines = ["| model | target | strategy | max rel. error (vs PyTorch; on the host: worst kernel) | compile + run s | result |",
             "|---|---|---|---:|---:|---|"]
    for r in rows:
        error = "-" if r["error"] is None else f"{r['error']:.1e}"
        result = r["failure"] or result_text(r)
        lines.append(f"| {r['model']} | {r['target']} | {r['fusion']} | {error} | {r['seconds']} | {result} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.model_names()), help="comma-separated zoo models")
    parser.add_argument("--targets", default="llvm,dsa/stcp920", help='comma-separated targets: names or JSON dicts, e.g. llvm,\'{"kind":"cuda","arch":"sm_90"}\'')
    parser.add_argument("--fusion", default="graphturbo", help="comma-separated strategies")
    parser.add_argument("--tol", type=float, default=1e-4, help="largest relative error allowed")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--jobs", type=int, default=1, help="models checked at once (processes)")
    parser.add_argument("--host-check", action="store_true",
                        help="where this machine lacks a target's device, check each kernel on the host CPU")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(zoo.model_names()))
    if unknown:
        parser.error(f"unknown zoo models: {', '.join(unknown)}")
    try:
        fusions = parse_fusions(args.fusion)
    except ValueError as err:
        parser.error(str(err))
    references = [f for f in fusions if f not in fusion_names()]
    if references:
        parser.error(f"{', '.join(references)}: not a fusion strategy (check_zoo compares with PyTorch itself)")
    names, targets = args.models.split(","), split_targets(args.targets)
    if args.jobs > 1:  # the DSA's kernel generator shares the CPUs among the models' processes
        os.environ.setdefault(JOBS_ENV, str(max(1, default_jobs() // args.jobs)))
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            per_model = list(pool.map(check, names, *zip(*[(targets, fusions, args.tol, args.host_check)] * len(names))))
    else:
        per_model = [check(name, targets, fusions, args.tol, args.host_check) for name in names]
    rows = [row for model_rows in per_model for row in model_rows]
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

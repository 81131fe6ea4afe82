"""Long fuzzing runs of every fusion strategy on random graphs.

    .venv/bin/python scripts/fuzz.py --cases 2000 --seed 0 --json fuzz.json
    .venv/bin/python scripts/fuzz.py --cases 50 --strategies stock,apollo --target llvm --target dsa/stcp920

Case ``i`` is ``random_graphs.random_module(seed + i)`` (reproducible); it is compiled under every
strategy on every target with the invariant checks on and compared with the unfused module
(:func:`tvm_fusion_ext.testing.differential.check_module`). A failing case is shrunk (its choice
sequence, :func:`~tvm_fusion_ext.testing.random_graphs.shrink_choices`, keeping the failures of
the same strategy and kind) and saved under ``--save-dir`` (default ``tests/regressions``), where
``tests/test_regressions.py`` checks it from then on. Prints a progress bar and a summary table;
``--json`` writes ``{"cases", "seed", "strategies", "targets", "checks", "builds", "seconds",
"failures": [{"case", "seed", "strategy", "target", "kind", "message", "file"}], "files"}``.
Exit status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

import tvm_fusion_ext
from tvm_fusion_ext.testing import differential
from tvm_fusion_ext.testing.random_graphs import GraphConfig, RecordedChoices, build_module, shrink_choices

REPO = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100, help="random graphs to check")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first case")
    parser.add_argument("--strategies", default="all", help="comma-separated names, or 'all'")
    parser.add_argument("--target", action="append", dest="targets",
                        help="repeatable; default: llvm, plus dsa/stcp920 for every --dsa-every'th case")
    parser.add_argument("--dsa-every", type=int, default=10,
                        help="without --target: also check every N'th case on dsa/stcp920 (0: never)")
    parser.add_argument("--policy", default="untuned", choices=("unscheduled", "untuned", "tuned"))
    parser.add_argument("--max-ops", type=int, default=GraphConfig.max_ops)
    parser.add_argument("--shrink-budget", type=int, default=100,
                        help="re-checks spent minimising each failing case")
    parser.add_argument("--save-dir", default=str(REPO / "tests" / "regressions"))
    parser.add_argument("--json", help="write the summary here")
    args = parser.parse_args(argv)

    names = tvm_fusion_ext.fusion_names()
    strategies = names if args.strategies == "all" else args.strategies.split(",")
    unknown = sorted(set(strategies) - set(names))
    if unknown:
        parser.error(f"unknown strategies {unknown}; known: {', '.join(names)}")
    config = GraphConfig(max_ops=args.max_ops)
    summary = {"cases": args.cases, "seed": args.seed, "strategies": strategies,
               "targets": sorted(set(args.targets or ["llvm"] + (
                   [differential.DSA_TARGET] if args.dsa_every else []))),
               "checks": 0, "builds": 0, "failures": [], "files": []}
    start = time.time()
    progress = tqdm(range(args.cases), desc="fuzz", unit="case", file=sys.stderr)
    for i in progress:
        seed = args.seed + i
        targets = args.targets or ["llvm"] + (
            [differential.DSA_TARGET] if args.dsa_every and i % args.dsa_every == 0 else [])
        choices = RecordedChoices(seed)
        mod = build_module(choices, config)
        result = differential.check_module(mod, strategies, targets, args.policy, seed=seed)
        summary["checks"] += result.checked
        summary["builds"] += result.builds
        if result.failures:
            mod, failures = _shrink(choices.values, result.failures, config, args)
            path = differential.save_regression(
                mod, failures, args.save_dir, origin=f"scripts/fuzz.py --seed {seed} --cases 1, shrunk")
            summary["files"].append(str(path))
            summary["failures"].extend(
                {"case": i, "seed": seed, "strategy": f.strategy, "target": f.target, "kind": f.kind,
                 "message": f.message[:2000], "file": str(path)} for f in result.failures)
            tqdm.write(f"case {i} (seed {seed}): {len(result.failures)} failures -> {path}",
                       file=sys.stderr)
            for failure in result.failures:
                tqdm.write(f"    {failure}", file=sys.stderr)
        progress.set_postfix(failures=len(summary["failures"]))
    summary["seconds"] = round(time.time() - start, 1)
    print(_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 1 if summary["failures"] else 0


def _shrink(values, failures, config, args):
    """The smallest module found that still fails the same way (same strategy, kind and exception
    type), re-checked once; the original case when the failure does not reproduce."""
    wanted = {f.signature for f in failures}
    strategies = sorted({f.strategy for f in failures if f.strategy in tvm_fusion_ext.fusion_names()})
    targets = sorted({f.target for f in failures if f.target != "-"}) or ["llvm"]
    original = build_module(RecordedChoices(values=values), config)
    if not strategies:  # the reference or the input failed: nothing to narrow down to
        return original, failures

    def check(candidate):
        mod = build_module(RecordedChoices(values=candidate), config)
        got = differential.check_module(mod, strategies, targets, args.policy).failures
        return mod, [f for f in got if f.signature in wanted]

    best = shrink_choices(values, lambda candidate: bool(check(candidate)[1]), args.shrink_budget)
    mod, still = check(best)
    return (mod, still) if still else (original, failures)


def _table(summary) -> str:
    by = Counter((f["strategy"], f["target"], f["kind"]) for f in summary["failures"])
    last = summary["seed"] + summary["cases"] - 1
    head = (f"cases {summary['cases']} (seeds {summary['seed']}..{last}), strategies "
            f"{len(summary['strategies'])}, targets {', '.join(summary['targets'])}, checks "
            f"{summary['checks']}, distinct builds {summary['builds']}, {summary['seconds']} s")
    lines = [head, "", "| strategy | target | kind | failing cases |", "| --- | --- | --- | --- |"]
    lines += [f"| {s} | {t} | {k} | {n} |" for (s, t, k), n in sorted(by.items())] or ["| - | - | - | 0 |"]
    lines += ["", f"regression files: {len(summary['files'])}"] + [f"  {p}" for p in summary["files"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Per-kernel wall time of one model built by an earlier commit and by the working tree, in turns.

    .venv/bin/python scripts/kernel_times_since.py --commit abd3a85 --model vit \\
        --fusion stock,neoflow --span "attention=matmul1|divide|softmax|matmul2"

Targets such as "the attention kernels at least 5x faster than at commit X" compare kernels of
two versions of this package, which no run of one version can time. The commit is checked out
into a temporary ``git worktree``; every build runs in its own Python process (the commit's
package first on ``sys.path``), compiles the zoo model for ``llvm`` as that version's
``parse_target`` completes it for the host (untuned) and times each
kernel through the relax VM's instrument hook, as ``scripts/kernel_times.py`` does. The builds
take turns, ``--rounds`` times; a kernel's time is its minimum over the rounds. ``--span
NAME=REGEX`` sums, per build, the kernels whose names match (kernel names differ between
versions: a span names the work, e.g. Q·Kᵀ through ·V). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in a fresh process with one version of the package first on sys.path. The build entry
# point moved (``testing.verify.build`` before ``driver.build.build``), so both are tried.
_CHILD = """
import json, sys, time
from collections import defaultdict
sys.path.insert(0, {root!r})
import tvm
from tvm import relax
try:
    from tvm_fusion_ext.driver.build import build
    from tvm_fusion_ext.driver.evaluation import configure_threads, load_workload, parse_target
except ImportError:
    from tvm_fusion_ext.testing.verify import build
    from tvm_fusion_ext.evaluation import configure_threads, load_workload, parse_target
configure_threads({threads})
workload = load_workload({model!r}, {model_args!r} or None)
vm = relax.VirtualMachine(build(workload.mod, {fusion!r}, parse_target("llvm"), "untuned"), tvm.cpu())
args = [tvm.runtime.tensor(x) for x in workload.inputs]
totals, calls, started = defaultdict(float), defaultdict(int), []
def instrument(_func, symbol, before_run, _ret, *_args):
    if before_run:
        started.append(time.perf_counter())
    else:
        name = "(relax VM builtins)" if str(symbol).startswith("vm.builtin.") else str(symbol)
        totals[name] += time.perf_counter() - started.pop()
        calls[name] += 1
    return 0
for _ in range(3):
    vm["main"](*args)
vm.set_instrument(instrument)
for _ in range({runs}):
    vm["main"](*args)
print(json.dumps({{name: [t * 1e3 / {runs}, calls[name] / {runs}] for name, t in totals.items()}}))
"""


def kernel_ms(root: str, model: str, model_args: list[str], fusion: str, runs: int, threads: int) -> dict:
    """``{kernel: [ms per inference, calls per inference]}`` of one build, in a fresh process."""
    code = _CHILD.format(root=root, model=model, model_args=model_args, fusion=fusion, runs=runs,
                         threads=threads)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{fusion} at {root} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_spans(items: list[str]) -> dict[str, re.Pattern]:
    spans = {}
    for item in items:
        name, sep, pattern = item.partition("=")
        if not sep:
            raise SystemExit(f"--span wants NAME=REGEX, got {item!r}")
        spans[name] = re.compile(pattern)
    return spans


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--model", required=True, help="zoo model name")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--fusion", default="stock", help="strategies, built by both versions")
    parser.add_argument("--span", action="append", default=[], metavar="NAME=REGEX",
                        help="sum the kernels whose names match REGEX (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10, help="timed inferences per build and round")
    parser.add_argument("--top", type=int, default=8, help="kernels printed per build")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    spans = parse_spans(args.span)
    model_args = ["batch=1", *args.model_arg]
    with tempfile.TemporaryDirectory(prefix="kernel-times-") as scratch:
        tree = os.path.join(scratch, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, args.commit],
                       check=True, capture_output=True)
        try:
            builds = [(f"{args.commit} {f}", tree, f) for f in args.fusion.split(",")] + \
                     [(f"working tree {f}", ROOT, f) for f in args.fusion.split(",")]
            best: dict[str, dict] = {}
            for round_ in range(args.rounds):
                for label, root, fusion in builds:
                    times = kernel_ms(root, args.model, model_args, fusion, args.runs, args.threads)
                    known = best.setdefault(label, {})
                    for name, (ms, calls) in times.items():
                        known[name] = [min(ms, known.get(name, [ms])[0]), calls]
                    print(f"round {round_ + 1}: {label} {sum(ms for ms, _ in times.values()):.3f} ms",
                          flush=True)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
    for label, times in best.items():
        ranked = sorted(times.items(), key=lambda item: -item[1][0])
        print(f"\n== {label}: {sum(ms for ms, _ in times.values()):.3f} ms per inference (kernel minima)")
        for name, pattern in spans.items():
            members = [(k, ms) for k, (ms, _) in ranked if pattern.search(k)]
            print(f"   span {name}: {sum(ms for _, ms in members):.3f} ms in "
                  f"{', '.join(k for k, _ in members) or 'no kernel'}")
        for name, (ms, calls) in ranked[:args.top]:
            print(f"   {ms * 1e3:9.1f} us  x{calls:4.0f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

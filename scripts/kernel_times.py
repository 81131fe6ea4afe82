#!/usr/bin/env python
"""Per-kernel wall time of one model under several fusion strategies, side by side.

    .venv/bin/python scripts/kernel_times.py --model shufflenet_v2 --model-arg image=112 \\
        --fusion stock,neoflow

Each strategy is compiled for ``--target`` (default ``llvm``; untuned) and run on that target's
device through the relax VM's instrument hook (``driver.kernel_times``: every call synchronised and
timed, the VM builtins as one entry). On a GPU each entry holds a launch and a synchronisation
besides the kernel, so read the large kernels there. The
strategies take turns, ``--rounds`` times, and the last round is printed, slowest kernels first,
with calls per inference: the kernel a strategy loses time in shows against the kernels of
``stock``. The instrument adds a few microseconds per call, so the totals read above ``compare``'s
latencies. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm
from tvm import relax

from tvm_fusion_ext.driver.build import build, target_device
from tvm_fusion_ext.driver.evaluation import configure_threads, load_workload, parse_fusions, parse_target
from tvm_fusion_ext.driver.kernel_times import kernel_times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="zoo model name or model file")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--fusion", default="stock,neoflow", help="comma-separated strategies")
    parser.add_argument("--runs", type=int, default=30, help="inferences per strategy and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top", type=int, default=25, help="kernels printed per strategy")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--target", default="llvm", help="target string or JSON (default llvm)")
    args = parser.parse_args(argv)
    configure_threads(args.threads)
    workload = load_workload(args.model, args.model_arg or None)
    target = parse_target(args.target)
    device = target_device(target)
    vms = {name: relax.VirtualMachine(build(workload.mod, name, target), device)
           for name in parse_fusions(args.fusion)}
    inputs = [tvm.runtime.tensor(x, device) for x in workload.inputs]
    for _ in range(args.rounds):
        times = {name: kernel_times(vm, inputs, device, args.runs) for name, vm in vms.items()}
    for name, entries in times.items():
        total = sum(e.ms_per_run for e in entries)
        print(f"== {name}: {total:.3f} ms per inference in {sum(e.calls_per_run for e in entries):.0f} calls")
        for e in entries[:args.top]:
            print(f"   {e.ms_per_run * 1e3:9.1f} us  x{e.calls_per_run:4.0f}  {e.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

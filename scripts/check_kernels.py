#!/usr/bin/env python
"""Check a strategy's build kernel by kernel: each scheduled kernel, alone on random inputs on the
target's device, against the same kernel unscheduled on the host CPU (``driver.kernel_check``).

    .venv/bin/python scripts/check_kernels.py --model dlrm --fusion apollo \\
        --target '{"kind":"cuda","arch":"sm_90"}'

Zoo models run at ``zoo.SMALL_ARGS`` unless ``--model-arg`` is given. With ``--on-host``, or where
this machine lacks the target's device (a CUDA target and no GPU), the scheduled kernels run on
the host CPU with their thread loops serial (``driver.kernel_check.threads_as_serial_loops``): a
wrong schedule shows there, races and lowering errors only on the device. Prints one line per kernel,
worst first; exits 1 if any kernel is off by more than ``--tol`` (relative to each output's largest
magnitude) or failed to build or run.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.driver.evaluation import load_workload, parse_target
from tvm_fusion_ext.driver.kernel_check import check_kernels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="zoo model or model file")
    parser.add_argument("--model-arg", action="append", default=None, help="zoo argument key=value")
    parser.add_argument("--fusion", required=True, help="comma-separated strategies")
    parser.add_argument("--target", default="llvm", help="target string or JSON dict")
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--on-host", action="store_true",
                        help="run the scheduled kernels on the host CPU, thread loops serial")
    args = parser.parse_args(argv)
    model_args = args.model_arg
    if model_args is None and args.model in zoo.SMALL_ARGS:
        model_args = [f"{k}={v}" for k, v in zoo.SMALL_ARGS[args.model].items()]
    workload = load_workload(args.model, model_args)
    target = parse_target(args.target)
    on_host = args.on_host or not tvm.device(target.get_target_device_type()).exist
    if on_host and not args.on_host:
        print(f"no {target.kind.name} device on this machine: the scheduled kernels run on the host "
              "CPU with their thread loops serial", flush=True)
    failed = False
    for fusion in args.fusion.split(","):
        checks = check_kernels(workload.mod, fusion, target, on_host=on_host)
        checks.sort(key=lambda c: -1.0 if c.failure else -(c.rel_error or 0.0))
        for check in checks:
            bad = bool(check.failure) or check.rel_error > args.tol
            failed |= bad
            status = check.failure or f"{check.rel_error:.1e}"
            print(f"{args.model} {fusion} {check.name}: {'FAIL ' if bad else ''}{status}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

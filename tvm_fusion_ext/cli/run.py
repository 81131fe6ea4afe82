"""``tvm-fusion run``: run a library written by ``tvm-fusion compile`` on inputs from an ``.npz``.

    tvm-fusion run model.so --inputs in.npz --outputs out.npz --profile

The inputs are checked against the sidecar ``<library>.json`` (names, shapes, dtypes). A GPU
library runs on the GPU (an error names the missing device on a machine without one). On a CPU
or GPU target it prints the median wall time of at least ``--runs`` runs after warm-up (as ``compare``
does); ``--profile`` adds a per-kernel table (host wall time per kernel, through the VM's
instrument hook). On a DSA target the kernels run emulated on the host, so the time printed is
the simulator's (:mod:`tvm_fusion_ext.target_dsa.profile`: kernels, bytes per memory level,
cycles); ``--profile`` adds the simulated cycles and bytes of every kernel call. ``--outputs``
writes the outputs as ``output_0``, ``output_1``, ... (tvmc's names).
"""

from __future__ import annotations

import argparse

HELP = "run a library written by tvm-fusion compile on .npz inputs; print its timing (or DSA profile)"
TOP_KERNELS = 20
PROFILE_RUNS = 10


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("run", help=HELP, description=HELP)
    parser.add_argument("library", help="the .so written by tvm-fusion compile (its .json sidecar beside it)")
    parser.add_argument("--inputs", required=True, metavar="NPZ", help="input arrays, keyed by input name")
    parser.add_argument("--outputs", metavar="NPZ", help="write the outputs here (output_0, output_1, ...)")
    parser.add_argument("--profile", action="store_true",
                        help="per-kernel times (CPU) or per-kernel simulated cycles and bytes (DSA)")
    parser.add_argument("--runs", type=int, default=20, help="minimum timed runs (median reported)")
    parser.add_argument("--threads", type=int, default=None,
                        help="TVM threads (default: TVM_NUM_THREADS, else all logical CPUs)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import tvm
    from tvm import relax

    from ..driver import artifacts, evaluation
    from ..driver.build import run as run_module
    from ..driver.build import target_device

    if args.runs < 1:
        raise ValueError("--runs must be at least 1")
    module, artifact = artifacts.load_artifact(args.library)
    inputs = artifact.check_inputs(artifacts.read_inputs(args.inputs), args.inputs)
    target = artifact.tvm_target()
    device = target_device(target)
    threads = evaluation.configure_threads(args.threads)
    outputs = run_module(module, inputs, device=device)
    mcpu = str(target.attrs.get("mcpu", ""))
    shown = f"dsa/{mcpu}" if "dsa" in target.keys else target.kind.name + (f" ({mcpu})" if mcpu else "")
    print(f"{args.library}: {artifact.model}, fusion {artifact.fusion}, policy {artifact.policy}, target {shown}")
    print("outputs: " + ", ".join(f"output_{i}: {x.dtype}{list(x.shape)}" for i, x in enumerate(outputs)))
    if "dsa" in target.keys:
        _print_dsa_profile(module, inputs, target, artifact, args.profile)
    else:
        vm = relax.VirtualMachine(module, device)
        main = vm["main"]
        args_on_device = [tvm.runtime.tensor(x, device) for x in inputs]
        call = (lambda: (main(*args_on_device), device.sync())) if "gpu" in target.keys else \
            (lambda: main(*args_on_device))  # a GPU call returns before its kernels finish
        latency = evaluation.measure_latency_ms(call, min_runs=args.runs)
        print(f"median latency {latency:.3f} ms ({threads} threads, at least {args.runs} runs after warm-up)")
        if args.profile:
            print(_kernel_table(vm, args_on_device, device))
    if args.outputs:
        np.savez(args.outputs, **{f"output_{i}": x for i, x in enumerate(outputs)})
        print(f"wrote {args.outputs}")
    return 0


def _print_dsa_profile(module, inputs, target, artifact, per_kernel: bool) -> None:
    from ..target_dsa.profile import profile_details

    if not artifact.dsa_kernel_models:
        raise ValueError(f"{artifact.model}: the sidecar has no DSA kernel models (recompile it)")
    details = profile_details(module, inputs, target, models=artifact.dsa_kernel_models)
    print(f"simulated DSA time {details['time_ms']:.4f} ms ({details['cycles']} cycles, "
          f"{details['kernels']} kernel calls)")
    print(f"bytes moved: DDR {details['ddr_bytes']}, GB {details['gb_bytes']}, LB {details['lb_bytes']}; "
          f"buffers {details['buffers']}; unit busy cycles {details['unit_busy']}")
    if per_kernel:
        rows = [(k["name"], str(k["cycles"]), str(k["ddr_bytes"]), str(k["gb_bytes"]), str(k["lb_bytes"]))
                for k in details["per_kernel"]]
        print(_table(("kernel", "cycles", "DDR bytes", "GB bytes", "LB bytes"), rows))


def _kernel_table(vm, args, device) -> str:
    """Host wall time per kernel, averaged over :data:`PROFILE_RUNS` runs (see
    :func:`tvm_fusion_ext.driver.kernel_times.kernel_times`)."""
    from ..driver.kernel_times import kernel_times

    times = kernel_times(vm, args, device, PROFILE_RUNS)
    total = sum(t.ms_per_run for t in times) or 1.0
    rows = [(t.name, f"{t.calls_per_run:g}", f"{t.ms_per_run:.3f}", f"{100 * t.ms_per_run / total:.1f}")
            for t in times[:TOP_KERNELS]]
    table = _table(("kernel", "calls/run", "ms/run", "%"), rows)
    if len(times) > TOP_KERNELS:
        table += f"\n... {len(times) - TOP_KERNELS} more kernels"
    return table


def _table(header: tuple, rows: list[tuple]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])

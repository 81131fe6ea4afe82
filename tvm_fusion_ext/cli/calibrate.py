"""``tvm-fusion calibrate``: measure the kernel cost model's rates on this machine again.

    tvm-fusion calibrate

The profitability check the fusion strategies consult (:mod:`tvm_fusion_ext.cost`) predicts kernel
times from rates measured once per machine and cached; a compile calibrates by itself when the
cache has no entry for the machine (or the file is corrupt). This command measures again (after a
hardware or load change) and rewrites the machine's entry, and measures NeoFlow's device costs
for this host's ``llvm`` target again (:mod:`tvm_fusion_ext.hardware.device_costs`), so that no
compile measures anything afterwards.
"""

from __future__ import annotations

import argparse

HELP = "measure the cost model's rates and NeoFlow's device costs on this machine again"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("calibrate", help=HELP, description=HELP)
    parser.add_argument("--threads", type=int, default=None,
                        help="TVM threads the parallel rate is measured with (default: TVM_NUM_THREADS, "
                             "else all logical CPUs, as compare and run use)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..cost import calibration
    from ..driver.evaluation import configure_threads, parse_target
    from ..hardware.device_costs import cache_path, load_or_measure

    # Without TVM_NUM_THREADS TVM's pool takes half the logical CPUs on x86, and the parallel
    # rate would be measured on fewer threads than the models run with.
    threads = configure_threads(args.threads)
    rates = calibration.load_or_calibrate(refresh=True)
    print(f"measured with {threads} TVM threads")
    print(f"calibrated {calibration.host_key()}; written to {calibration.cache_path()}")
    for name, value in rates.to_json().items():
        print(f"  {name:10s} {value:.4g}")
    costs = load_or_measure(parse_target("llvm"), refresh=True)
    print(f"device costs written to {cache_path()}: bandwidth {costs.bandwidth / 1e9:.1f} GB/s, "
          f"{costs.flops / 1e9:.0f} GFLOP/s, launch {costs.launch * 1e6:.2f} us")
    return 0

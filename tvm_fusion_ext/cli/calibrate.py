"""``tvm-fusion calibrate``: measure the kernel cost model's rates on this machine again.

    tvm-fusion calibrate

The profitability check the fusion strategies consult (:mod:`tvm_fusion_ext.cost`) predicts kernel
times from rates measured once per machine and cached; a compile calibrates by itself when the
cache has no entry for the machine (or the file is corrupt). This command measures again (after a
hardware or load change) and rewrites the machine's entry.
"""

from __future__ import annotations

import argparse

HELP = "measure the cost model's rates on this machine again and rewrite its cache entry"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("calibrate", help=HELP, description=HELP)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..cost import calibration

    rates = calibration.load_or_calibrate(refresh=True)
    print(f"calibrated {calibration.host_key()}; written to {calibration.cache_path()}")
    for name, value in rates.to_json().items():
        print(f"  {name:10s} {value:.4g}")
    return 0

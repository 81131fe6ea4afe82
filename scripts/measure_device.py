"""Measure NeoFlow's Pd, Pc and L on this machine and cache them (neoflow section 5.1, Eq. (4)).

    .venv/bin/python scripts/measure_device.py [--target llvm] [--keep]

Without ``--keep`` the cached entry for this machine and target is measured again.
"""

import argparse

import tvm

from tvm_fusion_ext.hardware.device_costs import cache_path, load_or_measure


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--keep", action="store_true", help="reuse a cached measurement if present")
    args = parser.parse_args()
    costs = load_or_measure(tvm.target.Target(args.target), refresh=not args.keep)
    print(f"Pd (bandwidth)     {costs.bandwidth / 1e9:10.2f} GB/s")
    print(f"Pc (compute)       {costs.flops / 1e9:10.2f} GFLOP/s")
    print(f"L  (launch)        {costs.launch * 1e6:10.2f} us")
    print(f"cache              {cache_path()}")


if __name__ == "__main__":
    main()

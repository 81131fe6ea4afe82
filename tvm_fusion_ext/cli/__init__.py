"""``tvm-fusion``: the package's command line; one module per subcommand.

Each subcommand module provides ``add_parser(subparsers)`` (registering its arguments and setting
``func``) and ``run(args) -> int``. User mistakes (unknown model, fusion or target, a malformed
model file) are ``ValueError``s: ``main`` prints them as one line and exits with status 2; a file
that cannot be read or written (``OSError``) is one line and status 1.
"""

from __future__ import annotations

import argparse
import sys

from . import calibrate, compare, compile, demo, explain, export, run, tune
from .options import resolve_model

SUBCOMMANDS = (compare, export, compile, run, tune, explain, calibrate, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tvm-fusion", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "model_option"):
        resolve_model(args)
    try:
        return args.func(args)
    except ValueError as err:
        print(f"tvm-fusion {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"tvm-fusion {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tvm-fusion {args.command}: interrupted", file=sys.stderr)
        return 130

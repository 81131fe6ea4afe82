"""Run TVM's own FuseOps tests against ``FuseOpsDominator`` (forward).

Usage::

    python scripts/run_tvm_fuse_ops_tests.py PATH/TO/test_transform_fuse_ops.py [pytest args...]

The file is apache/tvm's ``tests/python/relax/test_transform_fuse_ops.py``; this script fetches
nothing (get the file from a TVM checkout). ``relax.transform.FuseOps`` is replaced by
:class:`tvm_fusion_ext.relax_passes.fuse_ops_dominator.FuseOpsDominator` for the whole pytest run,
so every test compares the Python re-implementation's output with TVM's expected modules by exact
structural equality. The exit status is pytest's.
"""

from __future__ import annotations

import os
import sys

import pytest
from tvm import relax

from tvm_fusion_ext.relax_passes.fuse_ops_dominator import FuseOpsDominator


class _PatchFuseOps:
    """pytest plugin: ``relax.transform.FuseOps`` is ``FuseOpsDominator`` (forward) during the run."""

    def pytest_sessionstart(self, session):
        self.original = relax.transform.FuseOps
        relax.transform.FuseOps = FuseOpsDominator

    def pytest_sessionfinish(self, session, exitstatus):
        relax.transform.FuseOps = self.original


def main(argv: list[str]) -> int:
    if not argv or not os.path.isfile(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    path, extra = argv[0], argv[1:]
    return int(pytest.main([path, "-p", "no:cacheprovider", "-q", *extra], plugins=[_PatchFuseOps()]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Every module the fuzzer ever saved (``tests/regressions/*.py``) under every strategy.

Each file holds TVMScript ``Module``, ``FAILED`` (the ``(strategy, target, kind)`` failures seen
when it was saved) and ``XFAIL`` (strategy -> reason for failures not fixed yet). The module is
checked with ``differential.check_module`` under every registered strategy on ``llvm`` and on every
target it once failed on: no failure is allowed, except that each ``XFAIL`` strategy must still fail
(a strict xfail: a fixed bug must leave ``XFAIL``; entries for strategies no longer registered
are ignored).
"""

from pathlib import Path

import pytest
from tvm import relax

import tvm_fusion_ext
from tvm_fusion_ext.testing import differential

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.py"))


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression(path):
    mod, failed, xfail = differential.load_regression(path)
    assert relax.analysis.check_well_formed(mod)
    xfail = {name: reason for name, reason in xfail.items() if name in tvm_fusion_ext.fusion_names()}
    targets = ["llvm"] + sorted({target for _, target, _ in failed} - {"llvm", "-"})
    result = differential.check_module(mod, targets=targets)
    assert result.checked == len(targets) * len(tvm_fusion_ext.fusion_names())
    unexpected = [str(f) for f in result.failures if f.strategy not in xfail]
    assert not unexpected, f"{path.name}:\n" + "\n".join(unexpected)
    failing = {f.strategy for f in result.failures}
    fixed = sorted(set(xfail) - failing)
    assert not fixed, f"{path.name}: {fixed} pass now; remove them from XFAIL"

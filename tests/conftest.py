"""Shared pytest configuration: make ``tests/cases`` importable as ``cases``, and keep the
package's cache directory (NeoFlow's device constants, the kernel cost model's calibration) in a
temporary directory of the session, never the user's."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The cost model's rates for the whole suite: representative of a 2-core AVX2 host, fixed so that
# the strategies' decisions (kernel counts asserted by many tests) do not depend on how loaded the
# machine running the tests is. tests/test_cost_check.py calibrates for real in its own directory.
# pytest-xdist runs the suite on every core already: the DSA's kernel generator stays in each test
# process (tests/test_graphturbo_fusion.py checks its worker processes).
os.environ.setdefault("TVM_FUSION_EXT_JOBS", "1")

SUITE_RATES = {"launch": 2e-6, "bandwidth": 2e10, "parallel": 2.0, "tiled": 3.5e10, "reduce": 3e9,
               "vector": 1.3e10, "scalar": 6e9}


@pytest.fixture(scope="session", autouse=True)
def package_cache_dir(tmp_path_factory):
    from tvm_fusion_ext.cost import Rates, calibration
    from tvm_fusion_ext.hardware.device_costs import CACHE_ENV

    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("tvm_fusion_ext_cache"))
    calibration.forget_loaded()
    calibration.save_rates(Rates(**SUITE_RATES))
    yield os.environ[CACHE_ENV]
    calibration.forget_loaded()
    if previous is None:
        del os.environ[CACHE_ENV]
    else:
        os.environ[CACHE_ENV] = previous

"""Verification helpers shared by every test and the benchmarks.

* :func:`build`, :func:`run`, :func:`random_inputs`, :func:`max_abs_error` come from
  :mod:`tvm_fusion_ext.driver.build`, :func:`kernel_traffic` from
  :mod:`tvm_fusion_ext.analysis.kernel_traffic`; they are here so tests need one import.
* :func:`max_rel_error` measures output differences without asserting.
* :func:`assert_same_as_unfused` checks a strategy against the unfused module with per-dtype
  tolerances.
* :func:`count_kernels` and :func:`boundary_bytes` measure what fusion removes: kernel launches per
  inference and the bytes of tensors that cross kernel boundaries.
"""

from __future__ import annotations

import numpy as np
import tvm

from ..analysis.kernel_traffic import KernelTraffic, kernel_traffic
from ..driver.build import build, max_abs_error, max_rel_error, random_inputs, run

__all__ = ["EXACT", "TOLERANCES", "KernelTraffic", "assert_allclose_by_dtype", "assert_same_as_unfused",
           "boundary_bytes", "build", "count_kernels", "kernel_traffic", "max_abs_error", "max_rel_error",
           "random_inputs", "run"]

# Absolute and relative tolerance per output dtype.
TOLERANCES = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-9, 1e-9),
}
EXACT = (0.0, 0.0)


def assert_allclose_by_dtype(actual, expected, context: str = "") -> float:
    """Compare output lists with the tolerance of each output's dtype; returns the max abs error."""
    assert len(actual) == len(expected), f"{context}: {len(actual)} outputs vs {len(expected)}"
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"{context}: output {i} shape {a.shape} vs {e.shape}"
        atol, rtol = TOLERANCES.get(str(e.dtype), EXACT)
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg=f"{context}: output {i}")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype("float64") - e.astype("float64")))))
    return worst


def assert_same_as_unfused(mod: tvm.IRModule, fusion: str | tvm.transform.Pass, seed: int = 0,
                           target="llvm", policy: str = "untuned") -> float:
    """Compile ``mod`` under ``fusion`` and under no fusion; assert equal outputs on random inputs."""
    inputs = random_inputs(mod["main"], seed)
    expected = run(build(mod, "none", target, "unscheduled"), inputs)
    actual = run(build(mod, fusion, target, policy), inputs)
    return assert_allclose_by_dtype(actual, expected, context=f"fusion={fusion}")


def count_kernels(mod: tvm.IRModule, func_name: str = "main") -> int:
    return kernel_traffic(mod, func_name).kernels


def boundary_bytes(mod: tvm.IRModule, func_name: str = "main") -> int:
    return kernel_traffic(mod, func_name).boundary_bytes

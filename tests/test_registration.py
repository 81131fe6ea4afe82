"""Registration conventions: passes as global functions, fusion strategies as named pipelines."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
import tvm
from cases import foundation
from tvm import relax

import tvm_fusion_ext
from tvm_fusion_ext.testing import verify


def test_import_twice_and_reload_are_harmless():
    """Reloading the strategies, the pipelines package or the package keeps every registered
    strategy, in registration order (a reload used to leave only none and stock, and later tests
    in the same process could not find graphturbo)."""
    before = tvm_fusion_ext.fusion_names()
    importlib.reload(tvm_fusion_ext.pipelines.strategies)
    importlib.reload(tvm_fusion_ext.pipelines)
    importlib.reload(tvm_fusion_ext)
    assert {"none", "stock", "graphturbo", "apollo"} <= set(before)
    assert tvm_fusion_ext.fusion_names() == before


def test_passes_are_global_functions():
    make = tvm.get_global_func("tvm_fusion_ext.MaterializePartition")
    pass_ = make(lambda graph: [])
    assert isinstance(pass_, tvm.transform.Pass)


def test_every_pass_is_named_after_the_package():
    """Each pass runs as ``tvm_fusion_ext.<class name>`` (the name instruments and
    ``disabled_pass`` lists see), the name it is registered under as a global function."""
    from tvm_fusion_ext.relax_passes import (
        apollo_fusion,
        fuse_ops_dominator,
        graphturbo_fusion,
        materialize_partition,
        neoflow_fusion,
        open_compound_ops,
        parallel_fusion,
        schedule_execution_order,
        simplify,
    )
    from tvm_fusion_ext.target_dsa import PRESETS
    from tvm_fusion_ext.target_dsa import pipeline as dsa_pipeline
    from tvm_fusion_ext.target_dsa import schedule as dsa_schedule
    from tvm_fusion_ext.tir_passes import default_schedule, vector_erf

    modules = (apollo_fusion, fuse_ops_dominator, graphturbo_fusion, materialize_partition,
               neoflow_fusion, open_compound_ops, parallel_fusion, schedule_execution_order, simplify,
               dsa_pipeline, dsa_schedule, default_schedule, vector_erf)
    arguments = {"MaterializePartition": (lambda graph: [],), "DSASchedule": (PRESETS["stcp920"],)}
    classes = [obj for module in modules for obj in vars(module).values()
               if isinstance(obj, type) and issubclass(obj, tvm.transform.ModulePass)
               and obj.__module__ == module.__name__]
    assert len(classes) == 15
    for cls in classes:
        assert cls(*arguments.get(cls.__name__, ())).info.name == f"tvm_fusion_ext.{cls.__name__}"


@pytest.mark.parametrize("name", ["none", "stock"])
def test_pipelines_are_registered_for_tvm_compile(name):
    assert f"tvm_fusion_ext.{name}" in relax.pipeline.PIPELINE_MAP
    ex = tvm.compile(foundation.ConvBiasReluSoftmax, "llvm", relax_pipeline=f"tvm_fusion_ext.{name}")
    inputs = verify.random_inputs(foundation.ConvBiasReluSoftmax["main"])
    (out,) = verify.run(ex, inputs)
    np.testing.assert_allclose(out.sum(axis=1), np.ones((1, 8, 8)), rtol=1e-5)  # softmax rows


def test_fusion_changes_only_the_kernel_count():
    none = tvm_fusion_ext.fusion_pipeline("none")(foundation.ConvBiasReluSoftmax)
    stock = tvm_fusion_ext.fusion_pipeline("stock")(foundation.ConvBiasReluSoftmax)
    assert verify.count_kernels(none) == 4 and verify.count_kernels(stock) == 2
    assert verify.boundary_bytes(stock) < verify.boundary_bytes(none)
    assert verify.assert_same_as_unfused(foundation.ConvBiasReluSoftmax, "stock") < 1e-5


def test_unknown_strategy_and_policy_are_clear_errors():
    with pytest.raises(ValueError, match="unknown fusion strategy 'nope'"):
        tvm_fusion_ext.pipeline("nope")
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        tvm_fusion_ext.pipelines.schedule_passes(tvm.target.Target("llvm"), "fast")


def test_random_inputs_are_never_all_zero():
    for arr in verify.random_inputs(foundation.ConvBiasReluSoftmax["main"], seed=0):
        assert np.count_nonzero(arr) == arr.size


def test_targets_find_their_backend_by_key():
    from tvm_fusion_ext.backends import backend_for
    from tvm_fusion_ext.backends.cpu import CPUBackend
    from tvm_fusion_ext.backends.cuda import CUDABackend
    from tvm_fusion_ext.backends.dsa import DSABackend

    assert isinstance(backend_for(tvm.target.Target("llvm")), CPUBackend)
    assert isinstance(backend_for(tvm.target.Target("dsa/stcp920")), DSABackend)  # keys dsa, cpu
    assert isinstance(backend_for(tvm.target.Target({"kind": "cuda", "arch": "sm_80"})), CUDABackend)
    with pytest.raises(ValueError, match="target kind 'opencl' .*only for targets with a backend"):
        tvm_fusion_ext.pipelines.lowering_passes(tvm.target.Target("opencl"))


def test_every_relax_pass_class_is_exported_by_relax_passes():
    from tvm_fusion_ext import relax_passes
    from tvm_fusion_ext.relax_passes import FuseOpsDominator  # noqa: F401  (the import a user writes)

    modules = sorted(p.stem for p in Path(relax_passes.__file__).parent.glob("*.py") if p.stem != "__init__")
    for module in modules:
        source = (Path(relax_passes.__file__).parent / f"{module}.py").read_text()
        for name in re.findall(r'name="tvm_fusion_ext\.(\w+)"\)\nclass (\w+)', source):
            assert name[1] in relax_passes.__all__, (module, name)

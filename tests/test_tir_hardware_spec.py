"""Hardware spec objects: CPU facts from the Target and the machine; per-key registration."""

import dataclasses

import pytest
import tvm

from tvm_fusion_ext.hardware import CPUSpec, HardwareSpec, register_spec, spec_for_target


def test_cpu_spec_reads_target_options():
    spec = spec_for_target({"kind": "llvm", "num-cores": 3, "vector-width": 256})
    assert isinstance(spec, CPUSpec)
    assert spec.num_cores == 3 and spec.vector_bytes == 32 and spec.vector_lanes("float32") == 8
    assert spec.fast_memory_bytes == spec.l2_bytes > spec.l1_bytes > 0


def test_plain_llvm_target_is_sse_width():
    assert spec_for_target("llvm").vector_bytes == 16


def test_spec_is_frozen_and_hashable():
    spec = spec_for_target("llvm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.num_cores = 99
    assert hash(spec) == hash(spec_for_target("llvm"))


def test_registered_factory_wins_for_its_target_key():
    tvm.target.register_tag("test/fastmem", {"kind": "llvm", "keys": ["fastmem_test", "cpu"]},
                            override=True)
    register_spec("fastmem_test")(lambda target: HardwareSpec("fastmem", 4, 64, 256 * 1024))
    spec = spec_for_target(tvm.target.Target("test/fastmem"))
    assert spec.name == "fastmem" and spec.fast_memory_bytes == 256 * 1024

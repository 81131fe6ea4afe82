"""The analytical cost model behind APOLLO's Cost Model (3) (section 4.3), in one place.

Formula (3) scores composing ops ``m..k`` (sorted by cost) into one parallel kernel::

    gain = sum_{op=m..k} cost_op  -  max_{m<=op<=k} cost_op

The sum is the sequential time of the ops, each a kernel of its own with the whole machine; the
max is the time of the stitched kernel, where each op runs with the hardware resources allocated
to it (section 4.3: "estimated according to the shapes of its tensors and the allocated hardware
resources"). With ``k`` ops side by side each gets ``1/k`` of the cores and of the memory
bandwidth, so ``gain`` is positive only while the ops are too small to fill the machine alone.

The time of one op (a micro-graph) on ``c`` cores is a roofline plus one kernel launch::

    cost(op, c) = launch + max(flops / (core_flops * c'), bytes / min(c' * core_bandwidth, bandwidth_share))
    c' = min(c, parallelism(op))

where ``parallelism`` is the op's independent work items (output elements over vector lanes) and
``bytes`` what it reads and writes through memory. The machine constants come from the
:class:`~tvm_fusion_ext.hardware.spec.HardwareSpec` where it has them (``memory_bandwidth``,
``core_bandwidth``, ``clock_hz``, ``launch_overhead_s`` attributes of a target's spec); otherwise
from the CPU defaults below, which are the only literals of the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ...analysis.graph import DataflowGraph, NodeKind
from ...analysis.primitive_types import PrimitiveType
from ...hardware import HardwareSpec

# CPU defaults (a server core of the last decade): used when the spec does not say.
DEFAULT_CLOCK_HZ = 2.5e9  # per-core clock; peak = clock * 2 (FMA) * vector lanes (fp32)
DEFAULT_CORE_BANDWIDTH = 12e9  # bytes/s one core streams from DRAM
DEFAULT_MEMORY_BANDWIDTH = 40e9  # bytes/s all cores together
DEFAULT_LAUNCH_OVERHEAD_S = 5e-6  # one parallel kernel: thread-pool wake-up and join


class CostModel(Protocol):
    """``cost(group, share)``: time of the op ``group`` (node ids) when ``share`` ops run side by
    side in one stitched kernel (``share == 1``: alone, as its own kernel)."""

    def cost(self, group: frozenset[int], share: int) -> float: ...

    def is_compute_bound(self, group: frozenset[int]) -> bool: ...


def gain(model: CostModel, ops: Iterable[frozenset[int]]) -> float:
    """Cost Model (3) for composing ``ops`` into one parallel kernel."""
    ops = list(ops)
    k = len(ops)
    return sum(model.cost(op, 1) for op in ops) - max(model.cost(op, k) for op in ops)


@dataclass(frozen=True)
class MachineParameters:
    cores: int
    core_flops: float
    core_bandwidth: float
    memory_bandwidth: float
    launch_overhead_s: float
    vector_lanes: int

    @classmethod
    def from_spec(cls, spec: HardwareSpec) -> MachineParameters:
        lanes = spec.vector_lanes("float32")
        clock = getattr(spec, "clock_hz", DEFAULT_CLOCK_HZ)
        return cls(
            cores=spec.num_cores,
            core_flops=clock * 2 * lanes,
            core_bandwidth=getattr(spec, "core_bandwidth", DEFAULT_CORE_BANDWIDTH),
            memory_bandwidth=getattr(spec, "memory_bandwidth", DEFAULT_MEMORY_BANDWIDTH),
            launch_overhead_s=getattr(spec, "launch_overhead_s", DEFAULT_LAUNCH_OVERHEAD_S),
            vector_lanes=lanes,
        )


class RooflineCostModel:
    """The module docstring's model over the ops of a :class:`DataflowGraph`."""

    def __init__(self, graph: DataflowGraph, spec: HardwareSpec):
        self.graph = graph
        self.machine = MachineParameters.from_spec(spec)

    def flops(self, group: frozenset[int]) -> int:
        return sum(self.graph.nodes[n].flops for n in group)

    def bytes(self, group: frozenset[int]) -> int:
        """Bytes crossing the group's boundary: its kernels' arguments and results, less the
        intermediates that stay inside the group."""
        total = 0
        for n in group:
            node = self.graph.nodes[n]
            total += _argument_bytes(node) if node.prim_func is not None else 2 * node.out_bytes
            inside = node.outputs and not node.is_block_output and set(node.outputs) <= group
            if inside:
                total -= 2 * node.out_bytes  # written and read back by a consumer in the group
        return max(total, 0)

    def parallelism(self, group: frozenset[int]) -> int:
        elems = max((math.prod(s) for n in group for s in self.graph.nodes[n].shapes), default=1)
        return max(1, elems // self.machine.vector_lanes)

    def cost(self, group: frozenset[int], share: int) -> float:
        m = self.machine
        cores = min(m.cores / share, self.parallelism(group))
        bandwidth = min(cores * m.core_bandwidth, m.memory_bandwidth / share)
        return m.launch_overhead_s + max(self.flops(group) / (m.core_flops * cores),
                                         self.bytes(group) / bandwidth)

    def is_compute_bound(self, group: frozenset[int]) -> bool:
        """Section 4.3 excludes compute-bound ops: matmul / conv kernels, or any op whose flops take
        longer than its memory traffic on the whole machine."""
        if any(self.graph.nodes[n].ptype in (PrimitiveType.MATMUL, PrimitiveType.CONV) for n in group):
            return True
        m = self.machine
        return (self.flops(group) / (m.core_flops * m.cores)
                > self.bytes(group) / m.memory_bandwidth)


def _argument_bytes(node) -> int:
    """Bytes of every buffer parameter of the node's PrimFunc (inputs read, outputs written)."""
    import tvm

    total = 0
    for param in node.prim_func.params:
        ty = getattr(param, "ty", None)
        shape = getattr(ty, "shape", None)
        if shape is None:
            continue
        try:
            elems = math.prod(int(d) for d in shape)
        except TypeError:
            continue
        total += elems * tvm.runtime.DataType(str(ty.dtype)).bits // 8
    return total if node.kind is NodeKind.CALL_TIR else 0

"""Execution-order scheduling (MindSpore): BFS vs DFS peak memory on the paper's 6-kernel example."""

import numpy as np
import tvm
from cases.foundation import SixKernels

from tvm_fusion_ext.analysis.execution_order import BFS, DFS, choose_order, peak_live_bytes, topological_order
from tvm_fusion_ext.analysis.graph import DataflowGraph, build_graph
from tvm_fusion_ext.relax_passes.schedule_execution_order import ScheduleExecutionOrder
from tvm_fusion_ext.testing.verify import build, random_inputs, run

GB = 1 << 30


def _mindspore_six_kernels():
    """kernel1, kernel2 -> kernel3; kernel3, kernel4, kernel5 -> kernel6; every output 1 GB."""
    names = ["kernel1", "kernel2", "kernel4", "kernel5", "kernel3", "kernel6"]
    edges = [("kernel1", "kernel3"), ("kernel2", "kernel3"), ("kernel3", "kernel6"),
             ("kernel4", "kernel6"), ("kernel5", "kernel6")]
    return DataflowGraph.from_edges({n: "element-wise" for n in names}, edges, outputs=["kernel6"],
                                    out_bytes={n: GB for n in names})


def test_orders_match_the_paper():
    g = _mindspore_six_kernels()
    names = lambda order: [g.nodes[i].name for i in order]
    assert names(topological_order(g, BFS)) == ["kernel1", "kernel2", "kernel4", "kernel5",
                                                "kernel3", "kernel6"]
    assert names(topological_order(g, DFS)) == ["kernel1", "kernel2", "kernel3", "kernel4",
                                                "kernel5", "kernel6"]


def test_peaks_match_the_paper():
    g = _mindspore_six_kernels()
    assert peak_live_bytes(g, topological_order(g, BFS)) == 5 * GB
    assert peak_live_bytes(g, topological_order(g, DFS)) == 4 * GB
    choice = choose_order(g)
    assert choice.strategy == DFS and choice.peak_bytes == 4 * GB
    assert choice.peaks == {BFS: 5 * GB, DFS: 4 * GB}




def test_pass_reorders_dfs_and_keeps_results():
    legal = tvm.relax.transform.LegalizeOps()(SixKernels)
    sched = ScheduleExecutionOrder()
    out = sched(legal)
    order = [b.var.name for b in out["main"].body.blocks[0].bindings]
    assert order == ["k1", "k2", "k3", "k4", "t", "k5", "k6"]
    choice = sched.report[("main", 0)]
    assert choice.strategy == DFS and choice.peaks[BFS] > choice.peaks[DFS]
    assert choice.peak_bytes == peak_live_bytes(build_graph(out), list(range(7)))
    inputs = random_inputs(SixKernels["main"])
    expected = run(build(SixKernels, "none", policy="unscheduled"), inputs)
    np.testing.assert_allclose(run(build(out, "none", policy="unscheduled"), inputs)[0], expected[0],
                               rtol=1e-6)

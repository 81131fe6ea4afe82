"""Hand-computed simulator cases (GraphTurbo section 4.4 overlap, docs/dsa.md model).

The kernels are hand-scheduled TIR (tests/dsa_cases/hand.py) on a small chip loaded from a TOML
file, with round numbers: 1 GHz, DDR 64 B/cycle, GB 128 B/cycle, LB 256 B/cycle, 2 cores in one
cluster, DMA latency 10 cycles, launch 100 cycles, vector 8 ops/cycle, VME 32 MAC/cycle.
Every expected number below is derived in the comments.
"""

import dataclasses
from pathlib import Path

import pytest
from dsa_cases import hand
from tvm.script import tirx as T

from tvm_fusion_ext.target_dsa import kernel_model as km
from tvm_fusion_ext.target_dsa.simulator import simulate
from tvm_fusion_ext.target_dsa.spec import DSASpec

TINY_TOML = """
name = "tiny"
clusters = 1
cores_per_cluster = 2
lb_bytes = 65536
gb_bytes = 1048576
ddr_bandwidth = 64000000000
gb_bandwidth = 128000000000
lb_bandwidth = 256000000000
dma_engines = 1
dma_latency_cycles = 10
launch_cycles = 100
clock_hz = 1000000000

[[units]]
name = "vec"
kind = "vector"
ops_per_cycle = 8

[[units]]
name = "vme"
kind = "vmac"
ops_per_cycle = 32

[[units]]
name = "mme"
kind = "matrix"
ops_per_cycle = 128
matrix_shape = [16, 16, 16]
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> DSASpec:
    path = Path(tmp_path_factory.mktemp("spec")) / "tiny.toml"
    path.write_text(TINY_TOML)
    return DSASpec.from_file(path)


def _run(func, spec):
    model = km.kernel_model(func, "k")
    return model, simulate({"k": model}, ["k"], spec)


def test_tiled_gemm_in_lb(tiny):
    # 4 tiles of 32x32 on 2 cores: 2 tiles per core, both cores active -> DDR 32 B/cycle each.
    # Per tile: A 2 x (32x64x4) + B 2 x (64x32x4) = 32768 B in 4 transfers
    #   L = 32768/32 + 4*10 = 1064; C = 32*32*128 MAC / 32 = 4096; S = 4096/32 + 10 = 138.
    # Double-buffered on one DMA engine, the two K chunks pipelined inside the tile (``steps``
    # 2): one chunk loads A and B (266 each) then multiplies (2048): makespan 2580; the second
    # chunk follows at the busiest queue's pace (2048); the store after: 2580 + 2048 + 138 = 4766.
    # The second tile at the busiest queue's pace over the tile (VME 4096): 4766 + 4096 = 8862.
    model, prof = _run(hand.gemm_tiled, tiny)
    # A, B and C tiles (8192 + 8192 + 4096 B) are all live during the compute block.
    assert model["footprint"] == {"lb": 20480, "gb": 0, "lb_double_buffered": 36864,
                                  "lb_live": 20480, "lb_live_double_buffered": 36864,
                                  "gb_live": 0, "gb_per_tile": 0, "gb_per_tile_live": 0}
    assert [e.get("steps") for e in model["phases"][0]["events"]] == [2, 2, 2, None]
    assert prof["cycles"] == 100 + 8862
    assert prof["ddr_bytes"] == 4 * (32768 + 4096) == prof["lb_bytes"]
    assert prof["gb_bytes"] == 0
    assert prof["buffers"] == {"ddr": 1, "gb": 0, "lb": 3}
    assert prof["unit_busy"] == {"vec": 0, "vme": 4 * 4096, "mme": 0, "dma": 4 * (1064 + 138)}
    assert prof["time_ms"] == pytest.approx(8962 / 1e6)


def test_loops_nested_in_the_chunks_pipeline_with_them(tiny):
    # gemm_tiled's work with each chunk's product in a loop of 2 column halves of two blocks:
    # the loads sit in the chunk loop (2 iterations), the products 2 x 2 sequences deep. Every
    # event inside the chunk loop is one of its 2 pipelined steps, so the cycles are
    # gemm_tiled's 8862 (the two products 2048 + 2048 where its one is 4096). Pipelining only
    # the innermost sequence would leave the loads (1064) unhidden: the first tile would take
    # 1064 + 4096 + 138 = 5298 instead of 4766.
    model, prof = _run(hand.gemm_tiled_nested, tiny)
    events = model["phases"][0]["events"]
    assert [e.get("steps") for e in events] == [2, 2, 2, 2, None]
    assert [e["transfers"] for e in events if e["kind"] == "dma"] == [2, 2, 1]
    assert prof["cycles"] == 100 + 8862


def test_gemm_without_double_buffering_does_not_overlap(tiny):
    model = km.kernel_model(hand.gemm_tiled, "k")
    model["phases"][0]["double_buffer"] = False
    prof = simulate({"k": model}, ["k"], tiny)
    assert prof["cycles"] == 100 + 2 * (1064 + 4096 + 138)


def test_elementwise_chain_stays_in_lb(tiny):
    # Per 16-row tile: loads 2 x 16x256x4 = 32768 B (2 transfers), store 16384 B (1 transfer);
    # ops 4096 (mul) + 2 * 4096 (add, max) = 12288 -> 1536 cycles; the product never leaves LB.
    # L = 1024 + 20 = 1044, S = 512 + 10 = 522; 2 tiles per core, no overlap: 2 * 3102.
    model, prof = _run(hand.ew_chain, tiny)
    # The product depends on both loads, the add on the product, the store on the add.
    assert [e.get("deps", []) for e in model["phases"][0]["events"]] == [[], [], [0, 1], [2], [3]]
    assert prof["cycles"] == 100 + 2 * (1044 + 1536 + 522)
    assert prof["ddr_bytes"] == 4 * (32768 + 16384) == prof["lb_bytes"]
    assert prof["gb_bytes"] == 0
    assert prof["buffers"] == {"ddr": 1, "gb": 0, "lb": 4}
    assert model["footprint"]["lb"] == 4 * 16 * 256 * 4


def test_kernel_spilling_to_gb(tiny):
    # exp(A) (128 KB > LB) crosses from row tiles to column tiles through GB.
    # GB rate with 2 active cores in one cluster: 128 / 2 = 64 B/cycle; DDR 32 B/cycle.
    # Phase 1 tile: L = 32768/32 + 10 = 1034, C = 8192/8 = 1024, S (LB->GB) = 32768/64 + 10 = 522
    # Phase 2 tile: L (GB->LB) = 522, C = 1024, S (LB->DDR) = 1034; 2 tiles per core each.
    model, prof = _run(hand.spill_to_gb, tiny)
    assert prof["cycles"] == 100 + 2 * (1034 + 1024 + 522) + 2 * (522 + 1024 + 1034)
    assert prof["ddr_bytes"] == 4 * 32768 * 2
    assert prof["gb_bytes"] == 4 * 32768 * 2
    assert prof["lb_bytes"] == 4 * 32768 * 4
    assert prof["buffers"] == {"ddr": 1, "gb": 1, "lb": 4}
    assert model["footprint"]["gb"] == 64 * 512 * 4


def test_stcp920_gemm_numbers():
    # stcp920, tiles bound to 2 cores (dsa.cores=2): 2 active, DDR 136/2 = 68 B/cycle (< LB 128),
    # DMA latency 64, two DMA engines. L = ceil(32768/68) + 4*64 = 482 + 256 = 738;
    # C = 131072/64 = 2048; S = ceil(4096/68) + 64 = 61 + 64 = 125. Two tiles per core,
    # double-buffered with separate load/store engines. Per K chunk (2 of them): A and B
    # ceil(369/2) = 185 each, the multiply 1024: makespan 185 + 185 + 1024 = 1394, then the
    # second chunk at the VME's 1024, the store 125: 2543; the second tile at the VME's 2048.
    # (Without the chunks pipelined: L + C + S + max(L, C, S) = 4959.)
    from tvm_fusion_ext.target_dsa.spec import PRESETS

    _, prof = _run(hand.gemm_tiled, PRESETS["stcp920"])
    assert prof["cycles"] == 1000 + 1394 + 1024 + 125 + 2048


def test_simulation_is_deterministic(tiny):
    first = _run(hand.spill_to_gb, tiny)[1]
    assert all(_run(hand.spill_to_gb, tiny)[1] == first for _ in range(3))


def _two_units(deps: list[int], double_buffer: bool = True, tiles: int = 1) -> dict:
    """A phase of one matrix op (38400 MACs: 300 cycles on the 128-wide MME) and one vector op
    (4000 ops: 500 cycles on the 8-wide vector unit), the second depending on ``deps``."""
    vector = {"kind": "compute", "unit_kind": "vector", "ops": 4000}
    if deps:
        vector["deps"] = deps
    return {"name": "k", "buffers": {"ddr": 0, "gb": 0, "lb": 0}, "phases": [{
        "instances": tiles, "cores": 1, "double_buffer": double_buffer,
        "events": [{"kind": "compute", "unit_kind": "matrix", "ops": 38400}, vector]}]}


def test_independent_units_overlap_dependent_ones_add_up(tiny):
    # Section 4.4: the MME and the vector unit run side by side when nothing orders them.
    cycles = {deps: simulate({"k": _two_units(list(deps))}, ["k"], tiny)["cycles"] - 100
              for deps in ((), (0,))}
    assert cycles == {(): max(300, 500), (0,): 300 + 500}
    # Issued one after another (no instruction scheduling), they add up even when independent.
    assert simulate({"k": _two_units([], double_buffer=False)}, ["k"], tiny)["cycles"] == 100 + 800
    # Three tiles on one core: the first tile's makespan, then one tile per busiest queue (500).
    assert simulate({"k": _two_units([], tiles=3)}, ["k"], tiny)["cycles"] == 100 + 500 + 2 * 500
    assert simulate({"k": _two_units([0], tiles=3)}, ["k"], tiny)["cycles"] == 100 + 800 + 2 * 500
    busy = simulate({"k": _two_units([], tiles=3)}, ["k"], tiny)["unit_busy"]
    assert (busy["mme"], busy["vec"]) == (3 * 300, 3 * 500)


def test_gemm_beside_an_independent_vector_op(tiny):
    # 4 row tiles on 2 cores (2 each, both active: DDR 32 B/cycle), latency 10, one DMA engine.
    # Events of a tile, in program order (deps from T.reads / T.writes):
    #   0 A_lb 4096 B: 128 + 10 = 138   1 B_lb 4096 B: 138   2 X_lb 8192 B: 256 + 10 = 266
    #   3 MME 32x32x32 = 32768 / 128 = 256 (after 0, 1)   4 exp(X) * 2: 2 x 2048 / 8 = 512 (after 2)
    #   5 C 4096 B: 138 (after 3)   6 Y 8192 B: 266 (after 4)
    # One tile: DMA 0-138, 138-276, 276-542; MME 276-532; vector 542-1054; C on the DMA queue
    # 542-680; Y 1054-1320. Makespan 1320 (the MME hides behind X's load, C's store behind the
    # vector op), against 1714 summed. Second tile pipelined: the DMA queue is the busiest,
    # 138 + 138 + 266 + 138 + 266 = 946 per tile.
    model, prof = _run(hand.gemm_beside_scale, tiny)
    assert [e.get("deps", []) for e in model["phases"][0]["events"]] == [[], [], [], [0, 1], [2], [3], [4]]
    assert prof["cycles"] == 100 + 1320 + 946
    assert prof["unit_busy"] == {"vec": 4 * 512, "vme": 0, "mme": 4 * 256, "dma": 4 * 946}
    # Two DMA engines: loads 542 and stores 404 per tile on separate queues, the vector unit's
    # 512 in between: the steady state is the loads' 542; the first tile is unchanged.
    two = dataclasses.replace(tiny, dma_engines=2)
    assert _run(hand.gemm_beside_scale, two)[1]["cycles"] == 100 + 1320 + 542
    model["phases"][0]["double_buffer"] = False
    assert simulate({"k": model}, ["k"], tiny)["cycles"] == 100 + 2 * 1714


@T.prim_func(s_tir=True)
def _moves_and_a_data_select(a: T.Buffer((4, 8), "float32"), b: T.Buffer((4, 8), "float32"),
                             c: T.Buffer((4, 16), "float32"), d: T.Buffer((4, 18), "float32"),
                             e: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("concat"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = T.if_then_else(8 <= vj, b[vi, vj - 8], a[vi, vj])
    for i, j in T.grid(4, 18):
        with T.sblock("pad_and_scale"):
            vi, vj = T.axis.remap("SS", [i, j])
            d[vi, vj] = T.if_then_else(1 <= vj and vj < 17,  # noqa: PLR1716 (TVMScript has no chained comparisons)
                                       c[vi, vj - 1] * T.float32(2), T.float32(0))
    for i, j in T.grid(4, 16):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            e[vi, vj] = T.if_then_else(c[vi, vj] > T.float32(0), c[vi, vj], T.float32(0))


def test_a_select_on_indices_is_a_move_and_a_select_on_data_computes():
    """Concatenation and padding choose an element's source by its position (index arithmetic,
    like addresses): one operation per element moved, plus the arithmetic on it. A select on
    loaded values (ReLU) counts its comparison and the select."""
    model = km.kernel_model(_moves_and_a_data_select, "k")
    ops = [e["ops"] for phase in model["phases"] for e in phase["events"] if e["kind"] == "compute"]
    assert ops == [4 * 16, 4 * 18, 4 * 16 * 2]


def _chunked(steps: int | None, double_buffer: bool = True) -> dict:
    """One tile: a load of 4096 B from DDR in 4 transfers, a vector op of 3200 ops after it and a
    store of 640 B after that; the load and the op inside a loop of ``steps`` iterations."""
    inner = {"steps": steps} if steps else {}
    return {"name": "k", "buffers": {"ddr": 1, "gb": 0, "lb": 2}, "phases": [{
        "instances": 1, "cores": 1, "double_buffer": double_buffer, "events": [
            {"kind": "dma", "src": "ddr", "dst": "lb", "bytes": 4096, "transfers": 4, **inner},
            {"kind": "compute", "unit_kind": "vector", "ops": 3200, "deps": [0], **inner},
            {"kind": "dma", "src": "lb", "dst": "ddr", "bytes": 640, "transfers": 1, "deps": [1]}]}]}


def test_reduction_chunks_pipeline_inside_a_tile(tiny):
    # One active core: DDR 64 B/cycle. Load 4096/64 + 4 * 10 = 104, op 3200/8 = 400,
    # store 640/64 + 10 = 20; each depends on the one before: 524 issued in order.
    # In 4 double-buffered iterations: 26 + 100 for the first, then 3 * 100 at the vector
    # unit's pace while the next chunk loads, then the store: 126 + 300 + 20 = 446.
    cycles = {case: simulate({"k": _chunked(*case)}, ["k"], tiny)["cycles"] - 100
              for case in ((4,), (None,), (4, False))}
    assert cycles == {(4,): 446, (None,): 524, (4, False): 524}


def test_a_promotion_hides_behind_the_phases_before_its_first_use(tiny):
    # Section 4.4: the kernel's weight promotions, issued ahead of the layers, wait only for
    # the phase that first reads them. One tile on one core: DDR 64 B/cycle, GB 128, latency 10.
    #   W1 -> GB 3200 B: 50 + 10 = 60; W2 -> GB 25600 B: 400 + 10 = 410.
    #   scale: 800 ops / 8 = 100, reading X from DDR (3200 B / 64 = 50) and W1 from GB
    #     (3200 / 128 = 25) directly, writing GB (25): 200; its DDR bytes 3200 (50 cycles).
    #   shift: 6400 ops / 8 = 800, reading GB twice and writing Y in DDR directly:
    #     6400 * 4 / 128 * 2 + 25600 / 64 = 400 + 400: 1600.
    # In program order: 100 + 60 + 410 + 200 + 1600 = 2370. Issued ahead: scale waits for W1
    # (60); W2 advances while scale leaves DDR idle (200 - 50 = 150), so shift waits for the
    # remaining 410 - 150 = 260: 100 + 60 + 200 + 260 + 1600 = 2220.
    model, prof = _run(hand.promoted_ahead, tiny)
    assert [e["needed_by"] for e in model["phases"][0]["events"]] == [1, 2]
    assert prof["cycles"] == 2220
    in_order, prof = _run(hand.promoted_in_order, tiny)
    assert all("needed_by" not in e for e in in_order["phases"][0]["events"])
    assert prof["cycles"] == 2370
    # Promotions no phase reads only have to end with the kernel: the 470 cycles run beside
    # scale (150 DDR-idle) and shift (1600 - 25600 / 64 = 1200 DDR-idle): 100 + 200 + 1600.
    for event in model["phases"][0]["events"]:
        event["needed_by"] = 3
    assert simulate({"k": model}, ["k"], tiny)["cycles"] == 1900


def test_promotions_hide_behind_the_first_instance_of_an_instance_loop(tiny):
    # Promotions ahead of an overlapped instance loop of 2 instances: W1 (3200 B: 60 cycles) is
    # needed by its first phase (800 vector ops: 100 cycles per instance), W2 (25600 B: 410) by
    # its second (1600 ops: 200). The first instance waits 60 for W1, runs phase 1 while W2
    # advances 100, waits the remaining 310 and runs phase 2; the second instance follows at
    # max(P, R, D) = 300: 100 + 60 + 100 + 310 + 200 + 300 = 1070, against 100 + 470 + 300 + 300
    # with the promotions in program order.
    def vector(ops):
        return {"instances": 1, "cores": 1, "double_buffer": True, "repeat": 2,
                "overlap_group": 1, "prefetch": False,
                "events": [{"kind": "compute", "unit_kind": "vector", "ops": ops}]}

    promote = {"instances": 1, "cores": 1, "double_buffer": True, "events": [
        {"kind": "dma", "src": "ddr", "dst": "gb", "bytes": 3200, "transfers": 1, "needed_by": 1},
        {"kind": "dma", "src": "ddr", "dst": "gb", "bytes": 25600, "transfers": 1, "needed_by": 2}]}
    model = {"name": "k", "buffers": {"ddr": 0, "gb": 2, "lb": 0},
             "phases": [promote, vector(800), vector(1600)]}
    assert simulate({"k": model}, ["k"], tiny)["cycles"] == 1070
    for event in promote["events"]:
        del event["needed_by"]
    assert simulate({"k": model}, ["k"], tiny)["cycles"] == 1170

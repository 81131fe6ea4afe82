"""GraphTurbo's DSA kernel generator (graphturbo-dsa-scheduling.txt section 4) on a hand-written
sub-graph: y = relu(x @ w), x [64, 32], w [32, 32], on stcp920 (4 clusters of 8 cores, 64 KB LB).

The per-core pieces split the output rows into 32 pieces of 2 rows; the intermediate x @ w stays in
LB, the weight is promoted DDR -> GB once per cluster and GB -> LB per piece. Every number below is
derived in the comments from docs/dsa.md's model.
"""

import logging
from dataclasses import replace

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.script import tirx as T

from tvm_fusion_ext.partitioners.graphturbo.kernel_plan import VARIANTS, KernelOptions, SubgraphPlan
from tvm_fusion_ext.target_dsa import instance_schedule as search
from tvm_fusion_ext.target_dsa import instance_staging as staging
from tvm_fusion_ext.target_dsa import register_dsa_target
from tvm_fusion_ext.target_dsa.kernel_model import INSTANCES, TILE, kernel_model
from tvm_fusion_ext.target_dsa.simulator import fits, kernel_cycles, simulate
from tvm_fusion_ext.target_dsa.spec import PRESETS
from tvm_fusion_ext.target_dsa.tir_helpers import alloc_buffers, enclosing_only, new_schedule

SPEC = PRESETS["stcp920"]


@T.prim_func(s_tir=True)
def mlp(x: T.Buffer((64, 32), "float32"), w: T.Buffer((32, 32), "float32"),
        y: T.Buffer((64, 32), "float32")):
    h = T.sblock_alloc_buffer((64, 32))
    for i, j, k in T.grid(64, 32, 32):
        with T.sblock("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                h[vi, vj] = T.float32(0)
            h[vi, vj] = h[vi, vj] + x[vi, vk] * w[vk, vj]
    for i, j in T.grid(64, 32):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = T.max(h[vi, vj], T.float32(0))


PLAN = SubgraphPlan(dim=0, instances=4, binding=(8, 1), output_shape=(64, 32))


def _scopes(func) -> dict[str, str]:
    blocks = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)])
    return {b.name: b.scope() for block in blocks for b in block.alloc_buffers}


def test_pieces_keep_the_intermediate_in_lb_and_promote_the_weight():
    func = staging.stage_subgraph(mlp, SPEC, PLAN, {0: 32})
    scopes = _scopes(func)
    assert scopes["h_local.dsa_lb"] == "local.dsa_lb"  # x @ w never leaves the core
    assert scopes["w_global.dsa_gb"] == "global.dsa_gb"
    assert "global" not in scopes.values()  # nothing but the parameters lives in DDR
    model = kernel_model(func)
    promote, pieces = model["phases"]
    # Weight promotion: one DDR -> GB copy of w (32*32*4 B) per cluster, 4 clusters on 4 cores,
    # issued ahead of the layers (instruction scheduling is on); the pieces' phase needs it.
    assert (promote["instances"], promote["cores"]) == (4, 4)
    assert promote["events"] == [{"kind": "dma", "src": "ddr", "dst": "gb", "bytes": 4096,
                                  "transfers": 1, "tensor": "w", "needed_by": 1}]
    # Pieces: 32 on 32 cores, double-buffered; per piece 2 rows of x in (256 B), w GB -> LB,
    # 2*32*32 MACs, 2*32 max ops, 2 rows of y out.
    assert (pieces["instances"], pieces["cores"], pieces["double_buffer"]) == (32, 32, True)
    by_kind = {(e["kind"], e.get("src"), e.get("dst"), e.get("unit_kind")): e for e in pieces["events"]}
    assert by_kind[("dma", "ddr", "lb", None)]["bytes"] == 256
    assert by_kind[("dma", "gb", "lb", None)]["bytes"] == 4096
    assert by_kind[("compute", None, None, "vmac")]["ops"] == 2048
    assert by_kind[("dma", "lb", "ddr", None)]["bytes"] == 256
    assert fits(model, SPEC, reuse=True)
    prof = simulate({"k": model}, ["k"], SPEC)
    # DDR traffic: the group's input and output once, the weight once per cluster.
    assert prof["ddr_bytes"] == 4 * 4096 + 32 * (256 + 256)
    # Cycles: promotion A=4: DDR 136/4 = 34 B/cycle, ceil(4096/34) + 64 = 185.
    # Pieces A=32: DDR 4.25 B/cycle, GB 512/8 = 64 B/cycle; L = ceil(256/4.25) + 64 + 4096/64 + 64
    # = 253, C = 2048/64 + 64/16 = 36, S = 61 + 64 = 125; one piece per core: 414. Launch 1000.
    assert prof["cycles"] == 1000 + 185 + 414
    assert prof["buffers"] == {"ddr": 1, "gb": 1, "lb": 4}


def test_search_prefers_a_piece_per_core():
    staged = search.schedule_subgraph(mlp, SPEC, PLAN)
    assert staged.fits and staged.pieces >= SPEC.num_cores
    assert staged.cycles <= 1599


def test_layer_form_exchanges_layer_outputs_through_gb():
    """Fig. 15's first bar: no stitching, no instances - each layer one phase over all cores,
    x @ w written to GB and read back; the weight promoted once."""
    plan = SubgraphPlan(0, 4, (8, 1), (64, 32), options=VARIANTS["gb"])
    func = staging.stage_layers(mlp, SPEC, plan, instances=1)
    assert _scopes(func)["h_global.dsa_gb"] == "global.dsa_gb"
    model = kernel_model(func)
    tiled = [p for p in model["phases"] if p["cores"] == SPEC.num_cores]
    assert len(tiled) == 2 and not any(p["double_buffer"] for p in model["phases"])
    gb_out = [e for e in tiled[0]["events"] if e.get("src") == "lb" and e.get("dst") == "gb"]
    gb_in = [e for e in tiled[1]["events"] if e.get("src") == "gb" and e.get("dst") == "lb"]
    assert sum(e["bytes"] for e in gb_out) * tiled[0]["instances"] == 64 * 32 * 4
    assert sum(e["bytes"] for e in gb_in) * tiled[1]["instances"] == 64 * 32 * 4
    assert simulate({"k": model}, ["k"], SPEC)["buffers"]["ddr"] == 1


def test_instance_loop_repeats_the_layers():
    func = staging.stage_layers(mlp, SPEC, PLAN, instances=4)
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="pre")
    assert any(INSTANCES in (lp.annotations or {}) and int(lp.extent) == 4 for lp in loops)
    model = kernel_model(func)
    promote = [p for p in model["phases"] if "repeat" not in p]
    repeated = [p for p in model["phases"] if p.get("repeat") == 4]
    assert len(promote) == 1 and promote[0]["cores"] == SPEC.clusters  # the weight, once
    assert len(promote) + len(repeated) == len(model["phases"])  # the rest runs per instance
    macs = sum(p["repeat"] * p["instances"] * e["ops"] for p in repeated for e in p["events"]
               if e.get("unit_kind") in ("matrix", "vmac"))
    assert macs == 64 * 32 * 32  # nothing recomputed across the 4 instances
    assert sum(TILE in (lp.annotations or {}) for lp in loops) >= 2
    # The matrix unit's accumulator is initialised in the tile loop updating it, not in a loop
    # over all tiles of the instance before it (its LB buffer would hold the whole output).
    tiles = [{b.name_hint for b in _blocks(lp.body)} for lp in loops if TILE in (lp.annotations or {})]
    assert any({"mm_init", "mm_update_o"} <= names for names in tiles)


def _blocks(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlock, found.append)])
    return found


@pytest.mark.parametrize("splits", [{0: 3}, {1: 5}])
def test_pieces_must_divide_the_output(splits):
    with pytest.raises(staging.Unsupported, match="do not divide"):
        staging.stage_subgraph(mlp, SPEC, PLAN, splits)


def test_duplicate_buffer_names_are_made_unique():
    """FuseTIR may give several buffers one name; cache stages are named after buffers."""
    h = next(b for b in alloc_buffers(mlp) if b.name == "h")
    named_x = tvm.ir.Var("x", h.ty)
    clash = tvm_ffi.structural_map(mlp, [(tvm.ir.Var, lambda v: named_x if v.same_as(h) else v)])
    assert [b.name for b in alloc_buffers(clash)] == ["x"]
    renamed = staging.unique_buffer_names(clash)
    assert [b.name for b in alloc_buffers(renamed)] == ["x_1"]
    assert staging.unique_buffer_names(mlp).same_as(mlp)  # already unique: untouched
    assert tvm_ffi.structural_equal(renamed, mlp, map_free_vars=True)


@T.prim_func(s_tir=True)
def scaled_then_normalised(x: T.Buffer((64,), "float32"), y: T.Buffer((64,), "float32"),
                           z: T.Buffer((64,), "float32")):
    """Two outputs, the second computed from the first: ``y = 2 x``, ``z = y / sum(y)``."""
    s = T.sblock_alloc_buffer(())
    for i in range(64):
        with T.sblock("scale"):
            vi = T.axis.spatial(64, i)
            y[vi] = x[vi] * T.float32(2)
    for k in range(64):
        with T.sblock("total"):
            vk = T.axis.reduce(64, k)
            with T.init():
                s[()] = T.float32(0)
            s[()] = s[()] + y[vk]
    for i in range(64):
        with T.sblock("normalise"):
            vi = T.axis.spatial(64, i)
            z[vi] = y[vi] / s[()]


@pytest.mark.parametrize("variant", ["gb", "full"])
def test_an_output_read_by_a_later_layer_is_not_promoted_as_a_weight(variant):
    """Fuzzer regression: the layer form promoted the output ``y`` (read whole by the reduction,
    like a weight) DDR -> GB before the kernel had written it, so ``z`` used stale memory. The
    first access to ``y`` must be the write of ``scale``."""
    plan = SubgraphPlan(0, 1, (8,), (64,), options=VARIANTS[variant])
    for func in (staging.stage_layers(scaled_then_normalised, SPEC, plan),
                 search.schedule_subgraph(scaled_then_normalised, SPEC, plan).func):
        blocks = []
        tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)], order="pre")
        first = next(b for b in blocks if b.name_hint != "root"
                     and any(r.source.name == "y" for r in (*b.reads, *b.writes)))
        assert [w.source.name for w in first.writes] == ["y"], first.name_hint
        assert "y_global.dsa_gb" not in _scopes(func)


@T.prim_func(s_tir=True)
def total(x: T.Buffer((4,), "float32"), s: T.Buffer((), "float32")):
    for k in range(4):
        with T.sblock("total"):
            vk = T.axis.reduce(4, k)
            with T.init():
                s[()] = T.float32(0)
            s[()] = s[()] + x[vk]


def test_a_0d_output_has_no_pieces_and_takes_the_layer_form():
    """Fuzzer regression (IndexError): a 0-d output has no loop to split into per-core pieces."""
    plan = SubgraphPlan(0, 1, (), ())
    with pytest.raises(staging.Unsupported, match="0-d"):
        staging.stage_subgraph(total, SPEC, plan, {})
    assert search.schedule_subgraph(total, SPEC, plan).form == "layers"


def _two_layer_mlp(m: int, k: int, n: int):
    """y = relu(x @ w1) @ w2 with x [m, k], w1 [k, n], w2 [n, n]."""

    @T.prim_func(s_tir=True)
    def func(x: T.Buffer((m, k), "float32"), w1: T.Buffer((k, n), "float32"),
             w2: T.Buffer((n, n), "float32"), y: T.Buffer((m, n), "float32")):
        h = T.sblock_alloc_buffer((m, n))
        r = T.sblock_alloc_buffer((m, n))
        for i, j, kk in T.grid(m, n, k):
            with T.sblock("mm"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    h[vi, vj] = T.float32(0)
                h[vi, vj] = h[vi, vj] + x[vi, vk] * w1[vk, vj]
        for i, j in T.grid(m, n):
            with T.sblock("relu"):
                vi, vj = T.axis.remap("SS", [i, j])
                r[vi, vj] = T.max(h[vi, vj], T.float32(0))
        for i, j, kk in T.grid(m, n, n):
            with T.sblock("mm2"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                with T.init():
                    y[vi, vj] = T.float32(0)
                y[vi, vj] = y[vi, vj] + r[vi, vk] * w2[vk, vj]

    return func


def test_no_fig15_optimisation_makes_a_kernel_slower():
    """Each Fig. 15 bar also stages the kernel of the bar below it and keeps it when its own
    candidates are slower, so the bars never go down (gb >= lb >= instances >= full). On this MLP
    buffer stitching's layer form (relu runs in x @ w1's tile, so x @ w1 stays in LB) beats the
    layer-bound kernel of the first bar, whose layers exchange every output through GB."""
    func = _two_layer_mlp(512, 256, 256)
    plan = SubgraphPlan(dim=0, instances=8, binding=(8, 1), output_shape=(512, 256))
    chosen = {name: search.schedule_subgraph(func, SPEC, replace(plan, options=options))
              for name, options in VARIANTS.items()}
    assert all(staged.fits for staged in chosen.values())
    cycles = [chosen[name].cycles for name in ("gb", "lb", "instances", "full")]
    assert cycles == sorted(cycles, reverse=True)
    assert chosen["lb"].cycles < chosen["gb"].cycles and chosen["lb"].form == "layers"
    assert {scope for name, scope in _scopes(chosen["lb"].func).items()
            if name.startswith("h")} == {"local.dsa_lb"}  # no GB round trip of x @ w1


@T.prim_func(s_tir=True)
def batched_matmul(a: T.Buffer((64, 32, 32), "float32"), b: T.Buffer((64, 32, 32), "float32"),
                   c: T.Buffer((64, 32, 32), "float32")):
    for n, i, j, k in T.grid(64, 32, 32, 32):
        with T.sblock("bmm"):
            vn, vi, vj, vk = T.axis.remap("SSSR", [n, i, j, k])
            with T.init():
                c[vn, vi, vj] = T.float32(0)
            c[vn, vi, vj] = c[vn, vi, vj] + a[vn, vi, vk] * b[vn, vk, vj]


@T.prim_func(s_tir=True)
def wide_rows(x: T.Buffer((2, 2, 128, 128), "float32"), y: T.Buffer((2, 2, 128, 128), "float32")):
    for n, h, i, j in T.grid(2, 2, 128, 128):
        with T.sblock("exp"):
            vn, vh, vi, vj = T.axis.remap("SSSS", [n, h, i, j])
            y[vn, vh, vi, vj] = T.exp(x[vn, vh, vi, vj])


@pytest.mark.parametrize("func, shape", [(batched_matmul, (64, 32, 32)),
                                         (wide_rows, (2, 2, 128, 128))])
def test_layer_form_tiles_every_dimension_lb_needs(func, shape):
    """The layer-bound form (Fig. 15's first bar) of a batched GEMM tiles its batch loop too
    (64 batches of 16 x 16 tiles would take 64 KB per operand), and an element-wise layer whose
    two outer loops leave 128 x 128 rows per tile (64 KB in, 64 KB out) tiles a third loop: the
    kernel chosen fits LB, and the GEMM's tiles run on the matrix unit."""
    plan = SubgraphPlan(dim=0, instances=1, binding=(1,) * len(shape), output_shape=shape,
                        options=VARIANTS["gb"])
    staged = search.schedule_subgraph(func, SPEC, plan)
    assert staged.fits and staged.form == "layers"
    assert staged.model["footprint"]["lb_live"] <= SPEC.lb_bytes
    if func is batched_matmul:
        ops = {e["unit_kind"]: p["instances"] * e["ops"] for p in staged.model["phases"]
               for e in p["events"] if e["kind"] == "compute"}
        assert ops.get("matrix") == 64 * 32 * 32 * 32


def test_a_subgraph_without_a_fitting_kernel_is_declined(monkeypatch):
    """A kernel that does not fit LB cannot run: when no candidate fits, schedule_subgraph
    declines the sub-graph (DSASchedule then stages it per kernel) instead of choosing one."""
    from tvm_fusion_ext.target_dsa import schedule

    plan = SubgraphPlan(0, 4, (8, 1), (64, 32), options=VARIANTS["gb"])
    fitting = search.schedule_subgraph(mlp, SPEC, plan)
    assert fitting.fits
    monkeypatch.setattr(search, "_CHOSEN", {})
    monkeypatch.setattr(search, "_candidates", lambda *args: [replace(fitting, fits=False), None])
    with pytest.raises(staging.Unsupported, match="fits"):
        search.schedule_subgraph(mlp, SPEC, plan)
    assert schedule.subgraph_kernel(mlp, SPEC, plan.to_json()) is None


def test_gemm_epilogue_runs_in_its_tile_and_activations_are_prefetched_per_instance():
    """Section 4.1 in the layer form: relu runs in x @ w's tile, so x @ w only ever lives in LB;
    x (the GEMM's activation) is promoted DDR -> GB per instance by every cluster, and with
    instruction scheduling (section 4.4) the next instance's promotion overlaps this one's tiles:
    its GB slice counts twice and the kernel is faster than with the instances run back to back."""
    func = staging.stage_layers(mlp, SPEC, PLAN, instances=4)
    scopes = _scopes(func)
    assert "global" not in scopes.values() and scopes["x_global.dsa_gb"] == "global.dsa_gb"
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="pre")
    tiles = [{b.name_hint for b in _blocks(lp.body)} for lp in loops
             if TILE in (lp.annotations or {}) and int(lp.annotations["dsa.cores"]) == SPEC.num_cores]
    assert len(tiles) == 1 and {"mm_update_o", "relu"} <= tiles[0]
    model = kernel_model(func)
    prefetch = [p for p in model["phases"] if p.get("prefetch")]
    # Per instance and cluster: 16 rows of x (16 * 32 * 4 B), DDR -> GB, on the 4 clusters.
    assert [(p["instances"], p["cores"], p["repeat"]) for p in prefetch] == [(4, SPEC.clusters, 4)]
    assert prefetch[0]["events"] == [{"kind": "dma", "src": "ddr", "dst": "gb", "bytes": 2048,
                                      "transfers": 1, "tensor": "x"}]
    assert model["footprint"]["gb_live"] == 32 * 32 * 4 + 2 * 2048  # w, and x double buffered
    serial = {**model, "phases": [{k: v for k, v in p.items() if k not in ("overlap_group", "prefetch")}
                                  for p in model["phases"]]}
    assert kernel_cycles(model, SPEC) < kernel_cycles(serial, SPEC)


def test_a_weight_larger_than_gb_is_split_across_the_clusters():
    """A weight whose promotion does not fit GB whole is split along its output columns, one
    slice per cluster (``global.dsa_gb.slice4``, a quarter of its bytes in each GB); each
    cluster's tiles read only their slice, and the kernel computes the same numbers."""
    spec = replace(SPEC, gb_bytes=24000)
    func = _two_layer_mlp(64, 32, 128)
    plan = SubgraphPlan(dim=0, instances=4, binding=(8, 1), output_shape=(64, 128))
    staged = staging.stage_layers(func, spec, plan, instances=4)
    assert _scopes(staged)["w1_global.dsa_gb.slice4"] == "global.dsa_gb.slice4"
    model = kernel_model(staged)
    promote = model["phases"][0]
    assert (promote["instances"], promote["cores"]) == (4, 4)
    assert promote["events"][0]["bytes"] == 32 * 128 * 4 // 4  # one slice per cluster
    assert model["buffers"]["ddr"] == 1 and fits(model, spec, reuse=True)
    target = register_dsa_target("stcp920-gb24k", spec)
    lib = tvm.compile(tvm.IRModule({"main": staged}), target=target)
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.uniform(-1, 1, shape).astype("float32")
                 for shape in ((64, 32), (32, 128), (128, 128)))
    y = tvm.runtime.tensor(np.zeros((64, 128), "float32"))
    lib["main"](*(tvm.runtime.tensor(a) for a in (x, w1, w2)), y)
    np.testing.assert_allclose(y.numpy(), np.maximum(x @ w1, 0) @ w2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("instances", [1, 4])
def test_a_layer_tile_loop_holds_its_lb_peak(instances):
    """The layer form checks each layer's tile against LB on that tile loop alone
    (``tir_helpers.enclosing_only``): every LB buffer lives inside one tile loop, so the kernel's
    LB peak (GraphTurbo section 4.3, release after last use) is the largest of the loops' peaks,
    each computed with the same compacted sizes as in the whole kernel."""
    plan = SubgraphPlan(0, 8, (8, 1), (512, 256), options=replace(VARIANTS["full"], stitch=False))
    func = staging.stage_layers(_two_layer_mlp(512, 256, 256), SPEC, plan, instances=instances)
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="pre")
    tiles = [lp for lp in loops if TILE in (lp.annotations or {}) and
             int(lp.annotations["dsa.cores"]) == SPEC.num_cores]
    assert len(tiles) >= 2
    whole = kernel_model(func)["footprint"]
    models = [kernel_model(enclosing_only(func, lp)) for lp in tiles]
    assert all(len(m["phases"]) == 1 for m in models)  # the tile loop alone
    parts = [m["footprint"] for m in models]
    for key in ("lb_live", "lb_live_double_buffered"):
        assert whole[key] > 0 and max(p[key] for p in parts) == whole[key]
    with pytest.raises(ValueError, match="not in the function"):
        enclosing_only(mlp, tiles[0])


def _run_mlp(func, m: int, k: int, n: int) -> None:
    """Compile ``func`` (a :func:`_two_layer_mlp` kernel) for stcp920, run it on random inputs and
    compare with NumPy."""
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target("dsa/stcp920"))
    rng = np.random.default_rng(1)
    x, w1, w2 = (rng.uniform(-1, 1, shape).astype("float32") for shape in ((m, k), (k, n), (n, n)))
    y = tvm.runtime.tensor(np.zeros((m, n), "float32"))
    lib["main"](*(tvm.runtime.tensor(a) for a in (x, w1, w2)), y)
    np.testing.assert_allclose(y.numpy(), np.maximum(x @ w1, 0) @ w2, rtol=1e-5, atol=1e-5)


def _dma_tensors(model: dict) -> set[str]:
    """The tensors a kernel model's DMA events move (their GB copies named after them)."""
    return {e["tensor"].split("_global")[0] for p in model["phases"] for e in p["events"]
            if e["kind"] == "dma"}


# The MLP as Algorithm 4 sees it: SG 0 = relu(x @ w1) (output r), SG 1 = r @ w2, one instance each.
MLP_SHAPE = (512, 32)
MLP_ORDER, MLP_SHAPES, MLP_PRODUCERS = [0, 1], {0: MLP_SHAPE, 1: MLP_SHAPE}, {1: [0]}


def _fused_mlp():
    """:func:`_two_layer_mlp` with its op outputs named as ``FuseTIR`` names them
    (``h_intermediate``, ``r_intermediate``): the kernel of the chain SG 0 -> SG 1, whose plan
    gives the scope of r, the output of op 1 (relu) of the kernel's ops mm, relu, mm2."""
    func = _two_layer_mlp(*MLP_SHAPE, 32)
    renamed = {b: tvm.ir.Var(f"{b.name}{staging.FUSED_OUTPUT_TAG}", b.ty)
               for b in alloc_buffers(func)}
    return tvm_ffi.structural_map(func, [(tvm.ir.Var, lambda v: renamed.get(v, v))])


def test_an_intermediate_algorithm4_keeps_in_lb_never_leaves_the_core():
    """Algorithm 4 binds r @ w2 by rows (8, 1) and infers the same binding for r: r's scope is LB.
    With buffer stitching the kernel generator then runs x @ w1, relu and r @ w2 in one tile loop
    (16 rows of each on a core): neither x @ w1 nor r is ever moved by a DMA - the simulator counts
    DDR traffic for x, w1, w2 and y only, and no section 3.5 data movement."""
    from tvm_fusion_ext.partitioners.graphturbo.binding import infer_bindings

    binding = infer_bindings(MLP_ORDER, MLP_SHAPES, MLP_PRODUCERS, cores=8)
    assert binding.scope[0] == "LB" and binding.bind[0] == binding.bind[1] == (8, 1)
    func = _fused_mlp()
    plan = SubgraphPlan(0, 1, binding.bind[1], MLP_SHAPE, options=VARIANTS["lb"],
                        tensor_scopes=((1, MLP_SHAPE, binding.scope[0]),))
    staged = staging.stage_layers(func, SPEC, plan, stitch_runs=True)
    scopes = _scopes(staged)
    assert all(scope == "local.dsa_lb" for name, scope in scopes.items() if name[0] in "hr")
    model = kernel_model(staged)
    tiles = [p for p in model["phases"] if p["cores"] == SPEC.num_cores]
    assert len(tiles) == 1  # the three layers, stitched
    assert _dma_tensors(model) == {"x", "w1", "w2", "y"}
    prof = simulate({"k": model}, ["k"], SPEC)
    ddr = sum(p.get("repeat", 1) * p["instances"] * e["bytes"] for p in model["phases"]
              for e in p["events"] if e["kind"] == "dma" and "ddr" in (e["src"], e["dst"]))
    assert prof["ddr_bytes"] == ddr > 0
    assert prof["movement_bytes"] == {"copy": 0, "redistribute": 0}
    unstitched = kernel_model(staging.stage_layers(func, SPEC, replace(plan, options=VARIANTS["gb"])))
    assert kernel_cycles(model, SPEC) < kernel_cycles(unstitched, SPEC)
    _run_mlp(staged, *MLP_SHAPE, 32)


def test_a_binding_mismatch_exchanges_the_tensor_through_gb_with_copy_and_redistribute():
    """r is also read by a sub-graph whose rows cannot be bound (bound (1, 8)): Algorithm 4 infers
    two bindings for r and puts it in GB (lines 11-12). The kernel generator then does not stitch
    across r: relu's tiles copy their rows of r LB -> GB, r @ w2's tiles (a different tiling)
    redistribute it GB -> LB (section 3.5, Fig. 9), never through DDR; the simulator counts both
    ops' bytes."""
    from tvm_fusion_ext.partitioners.graphturbo.binding import infer_bindings

    binding = infer_bindings([0, 1, 2], {**MLP_SHAPES, 2: MLP_SHAPE}, {1: [0], 2: [0]}, cores=8,
                             unbindable={2: frozenset({0})})
    assert binding.scope[0] == "GB"
    func = _fused_mlp()
    plan = SubgraphPlan(0, 1, binding.bind[1], MLP_SHAPE, options=VARIANTS["lb"],
                        tensor_scopes=((1, MLP_SHAPE, binding.scope[0]),))
    assert staging.gb_scoped_tensors(func, plan) == {"r_intermediate"}
    with pytest.raises(staging.NothingStitched):  # no run of layers stitches across r
        staging.stage_layers(func, SPEC, plan, stitch_runs=True)
    staged = staging.stage_layers(func, SPEC, plan)
    assert any(name.startswith("r") and scope == "global.dsa_gb" for name, scope in _scopes(staged).items())
    model = kernel_model(staged)
    moved = {}
    for p in model["phases"]:
        for e in p["events"]:
            if "movement" in e:
                assert e["tensor"].startswith("r") and "ddr" not in (e["src"], e["dst"])
                moved[e["movement"]] = moved.get(e["movement"], 0) + p["instances"] * e["bytes"]
    r_bytes = MLP_SHAPE[0] * MLP_SHAPE[1] * 4
    assert moved["copy"] == r_bytes  # every row of r written to GB once
    assert moved["redistribute"] >= r_bytes  # and read by every tile of r @ w2 that needs it
    prof = simulate({"k": model}, ["k"], SPEC)
    assert prof["movement_bytes"] == moved
    assert "r" not in {e["tensor"] for p in model["phases"] for e in p["events"]
                       if e["kind"] == "dma" and "ddr" in (e["src"], e["dst"])}
    _run_mlp(staged, *MLP_SHAPE, 32)


def _fused_prim_func(mod) -> tirx.PrimFunc:
    """The one PrimFunc ``FuseOps`` and ``FuseTIR`` make of a legalized one-layer module."""
    from tvm import relax

    mod = relax.transform.LegalizeOps()(mod)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod)))
    return next(f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc))


def _depthwise_layer():
    """A stride-2 depthwise 3x3 conv with its scale and ReLU6 (MobileNetV2's layer), [8, 16, 32, 32]
    -> [8, 16, 16, 16], fused into one PrimFunc."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16, 32, 32), "float32"))
    w = relax.Var("w", relax.TensorType((16, 1, 3, 3), "float32"))
    s = relax.Var("s", relax.TensorType((1, 16, 1, 1), "float32"))
    with bb.function("main", [x, w, s]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, strides=2, padding=1, groups=16))
            y = bb.emit(relax.op.clip(relax.op.multiply(y, s), 0.0, 6.0))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return _fused_prim_func(bb.get())


def test_a_planned_kernel_is_never_slower_than_the_staging_schedule():
    """GraphTurbo's kernel generator picks among implementations (section 4); the DSA staging
    schedule of the same PrimFunc is one of them. Here the generator's best form (the layer form)
    takes more cycles than the staging schedule, so ``DSASchedule`` keeps the staging one."""
    from tvm_fusion_ext.partitioners.graphturbo.kernel_plan import PLANS_ATTR
    from tvm_fusion_ext.target_dsa.schedule import DSASchedule, staged_kernel

    func = _depthwise_layer()
    plan = SubgraphPlan(dim=0, instances=1, binding=(8, 1, 1, 1), output_shape=(8, 16, 16, 16))
    generated = search.schedule_subgraph(func, SPEC, plan)
    _, staging_cycles = staged_kernel(func, SPEC)
    assert generated.cycles > staging_cycles  # the case the comparison is for
    mod = tvm.IRModule({"layer": func}).with_attr(PLANS_ATTR, {"layer": plan.to_json()})
    scheduled = DSASchedule(SPEC)(mod)["layer"]
    assert kernel_cycles(kernel_model(scheduled), SPEC) == staging_cycles


@pytest.mark.zoo
@pytest.mark.parametrize("stitch_runs", [False, True])
def test_layer_windows_stage_what_the_whole_function_stages(stitch_runs):
    """The layer form staged one window at a time (``target_dsa/layer_windows.py``) is the
    function staging every layer on the whole function gives, or declined alike: ViT's chain
    kernel (2 layers), over the whole output and over the plan's instances."""
    from tvm_fusion_ext import zoo
    from tvm_fusion_ext.partitioners.graphturbo.kernel_plan import PLANS_ATTR
    from tvm_fusion_ext.pipelines import fusion_pipeline

    target = tvm.target.Target("dsa/stcp920")
    mod = zoo.load("vit", {"batch": 32, "image": 64, "depth": 2}).relax("torch")
    with target:
        fused = fusion_pipeline("graphturbo", target)(mod)
    plans = {name: SubgraphPlan.from_json(str(plan)) for name, plan in fused.attrs[PLANS_ATTR].items()}
    name = max(plans, key=lambda n: len(alloc_buffers(fused[n])))  # the chain of both layers
    func, plan = staging.unique_buffer_names(fused[name]), plans[name]

    def staged(instances, windows):
        try:
            return staging.stage_layers(func, SPEC, plan, instances, stitch_runs, windows=windows)
        except staging.Unsupported as err:
            return str(err)

    results = [(staged(n, False), staged(n, True)) for n in sorted({1, plan.instances})]
    assert any(not isinstance(whole, str) for whole, _ in results)
    for whole, windowed in results:
        assert whole == windowed if isinstance(whole, str) else tvm_ffi.structural_equal(windowed, whole)


def _conv_layer(n: int, c: int, f: int, hw: int, kernel: int = 3, stride: int = 1):
    """A ``kernel`` x ``kernel`` conv (padding ``kernel // 2``) of ``c`` to ``f`` channels with its
    bias and ReLU, [n, c, hw, hw] -> [n, f, hw / stride, hw / stride], fused into one PrimFunc."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, hw, hw), "float32"))
    w = relax.Var("w", relax.TensorType((f, c, kernel, kernel), "float32"))
    b = relax.Var("b", relax.TensorType((1, f, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, w, strides=stride, padding=kernel // 2)
            y = bb.emit(relax.op.nn.relu(relax.op.add(conv, b)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return _fused_prim_func(bb.get())


def test_a_subgraph_planned_as_one_instance_still_runs_as_instances():
    """A layer planned as one instance (Algorithm 1 found no single-dimension split that fits,
    as for ResNet-50's 56 x 56 layers at batch 64) gets the layer form over an instance per image
    among its candidates, so it is as fast as the kernel of the plan that splits the images into
    instances (before, its pieces and the layer form over the whole output were all it had)."""
    n = 8
    func = _conv_layer(n, 64, 64, 56)
    one = SubgraphPlan(dim=0, instances=1, binding=(2, 4, 1, 1), output_shape=(n, 64, 56, 56))
    unsplit = search.schedule_subgraph(func, SPEC, one)
    assert unsplit.form == "layers" and unsplit.splits.get(0, 1) > 1
    assert unsplit.cycles <= search.schedule_subgraph(func, SPEC, replace(one, instances=n)).cycles


def test_a_conv_split_along_its_channels_also_tries_instances_per_image():
    """ResNet-50's down-sampling 1x1 conv (stride 2, 256 -> 512 channels) planned along its
    output channels re-reads its whole input per instance; the layer form over an instance per
    image is a candidate too and wins by far, as fast as a plan along the images."""
    n = 4
    func = _conv_layer(n, 256, 512, 56, kernel=1, stride=2)
    channels = SubgraphPlan(dim=1, instances=10, binding=(4, 2, 1, 1), output_shape=(n, 512, 28, 28))
    images = SubgraphPlan(dim=0, instances=n, binding=(8, 1, 1, 1), output_shape=(n, 512, 28, 28))
    chosen = search.schedule_subgraph(func, SPEC, channels)
    assert chosen.splits == {0: n}
    assert chosen.cycles <= search.schedule_subgraph(func, SPEC, images).cycles


def _conv_pair(n: int, c: int, hw: int) -> tirx.PrimFunc:
    """Two 3x3 convs of ``c`` channels (padding 1), each with its ReLU, [n, c, hw, hw] ->
    [n, c, hw, hw]: one sub-graph's PrimFunc as the DSA's kernel generator receives it."""
    from tvm import relax

    from tvm_fusion_ext.analysis.graph import build_graphs
    from tvm_fusion_ext.cost import fused_kernel
    from tvm_fusion_ext.pipelines import preprocess_passes

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, hw, hw), "float32"))
    w1 = relax.Var("w1", relax.TensorType((c, c, 3, 3), "float32"))
    w2 = relax.Var("w2", relax.TensorType((c, c, 3, 3), "float32"))
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w1, padding=1)))
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(h, w2, padding=1)))
        bb.emit_func_output(out)
    with tvm.target.Target("dsa/stcp920"):
        graph = build_graphs(tvm.transform.Sequential(preprocess_passes())(bb.get()))[0]
    return fused_kernel(graph, [node.index for node in graph.nodes if node.fusible], layout_free=False)


def test_a_tensorization_rewriting_a_promoted_weight_is_staged_in_its_window(monkeypatch):
    """A conv's tensorization lays out its promoted weight anew (``transform_layout``), which
    rewrites the promotion outside the pieces' loop: the window splices the rewritten promotion
    back in place instead of staging the step again on the whole function, and the kernel is the
    one the whole function gives."""
    from tvm_fusion_ext.target_dsa import layer_windows

    spliced = []
    in_window = layer_windows.LayerWindows._in_window

    def counting(self, names, step, local=False):
        before = list(self.root)
        done = in_window(self, names, step, local)
        outside = [i for i, s in enumerate(before) if i != self.index]
        spliced.extend(names for i in outside if done and not before[i].same_as(self.root[i]))
        return done

    monkeypatch.setattr(layer_windows.LayerWindows, "_in_window", counting)
    func = _conv_pair(4, 32, 28)
    plan = SubgraphPlan(dim=0, instances=4, binding=(4, 2, 1, 1), output_shape=(4, 32, 28, 28))
    windowed = staging.stage_subgraph(func, SPEC, plan, {0: 4}, windows=True)
    assert spliced  # the case this test is for
    assert tvm_ffi.structural_equal(windowed, staging.stage_subgraph(func, SPEC, plan, {0: 4}, windows=False))


def test_fig15_lb_bar_tiles_the_layers_one_image_at_a_time():
    """Fig. 15's second bar without instance splitting: over the whole batch, the intermediate of
    two convs (4 x 16 x 224 x 224 floats, 12.8 MB) exceeds GB and the first bar's layer form
    spills it to DDR; the second bar also tiles the layers one image at a time, keeping each
    image's intermediate (3.2 MB) on chip, and is faster by far."""
    n, c, hw = 4, 16, 224
    func = _conv_pair(n, c, hw)
    plan = SubgraphPlan(dim=0, instances=n, binding=(4, 2, 1, 1), output_shape=(n, c, hw, hw))
    gb, lb = (search.schedule_subgraph(func, SPEC, replace(plan, options=VARIANTS[bar]))
              for bar in ("gb", "lb"))
    assert gb.model["buffers"]["ddr"] > 1 and lb.model["buffers"]["ddr"] == 1  # only the output
    assert (lb.form, lb.splits) == ("layers", {0: n})
    assert 2 * lb.cycles < gb.cycles


def test_fig15_bars_stage_each_layer_form_once(monkeypatch):
    """The full bar's kernel search also runs the bars below it (each must not be slower); the
    layer forms two bars stage alike (one instance, the same stitching and double buffering) are
    staged once, and the chosen kernel is the one staging each bar's forms apart gives."""
    func = _two_layer_mlp(512, 256, 256)
    plan = SubgraphPlan(dim=0, instances=8, binding=(8, 1), output_shape=(512, 256))
    staged_forms = []
    stage = search._layer_candidate

    def counting(func, spec, plan, instances, stitch_runs=False):
        staged_forms.append((instances, stitch_runs, plan.options.stitch, plan.options.instruction_scheduling,
                             plan.dim if instances > 1 else None))
        return stage(func, spec, plan, instances, stitch_runs)

    monkeypatch.setattr(search, "_layer_candidate", counting)
    monkeypatch.setattr(search, "_CHOSEN", {})
    shared = search.schedule_subgraph(func, SPEC, plan)
    assert staged_forms and len(staged_forms) == len(set(staged_forms))

    monkeypatch.setattr(search, "_CHOSEN", {})
    monkeypatch.setattr(search._LayerForms, "stage", lambda self, func, spec, plan, n, stitch_runs=False:
                        search._layer_candidate(func, spec, plan, n, stitch_runs))
    staged_forms.clear()
    apart = search.schedule_subgraph(func, SPEC, plan)
    assert len(staged_forms) > len(set(staged_forms))  # without the sharing, a form is staged twice
    assert (shared.cycles, shared.form, shared.splits) == (apart.cycles, apart.form, apart.splits)
    tvm.ir.assert_structural_equal(shared.func, apart.func)


def test_fig15_bars_staged_apart_give_the_kernel_staged_together(monkeypatch):
    """The bars of one sub-graph staged each on its own (``bar_candidates``, what a worker
    process runs) and chosen among afterwards (``schedule_subgraph_from``) give the kernel one
    ``schedule_subgraph`` call chooses; a bar whose staging failed fails the same way."""
    func = _two_layer_mlp(512, 256, 256)
    plan = SubgraphPlan(dim=0, instances=8, binding=(8, 1), output_shape=(512, 256))
    monkeypatch.setattr(search, "_CHOSEN", {})
    together = search.schedule_subgraph(func, SPEC, plan)
    bars = search.bar_plans(plan)
    assert [bar.options for bar in bars][::-1] == [
        KernelOptions(stitch=False, instances=False, instruction_scheduling=False),
        KernelOptions(stitch=True, instances=False, instruction_scheduling=False),
        KernelOptions(stitch=True, instances=True, instruction_scheduling=False),
        KernelOptions()]
    staged = {bar.to_json(): search.bar_candidates((func, SPEC, bar, below > 0)) for below, bar in enumerate(bars)}
    monkeypatch.setattr(search, "_CHOSEN", {})
    apart = search.schedule_subgraph_from(func, SPEC, plan, staged)
    assert (together.cycles, together.form, together.splits) == (apart.cycles, apart.form, apart.splits)
    tvm.ir.assert_structural_equal(together.func, apart.func)

    monkeypatch.setattr(search, "_CHOSEN", {})
    staged[bars[0].to_json()] = search.Unsupported("staged elsewhere and declined")
    with pytest.raises(search.Unsupported, match="staged elsewhere"):
        search.schedule_subgraph_from(func, SPEC, plan, staged)


def test_staging_schedules_render_their_errors_only_when_debugging(caplog):
    """A failed primitive of a staging schedule carries the function rendered into its message
    only while the DSA logger shows debug messages (rendering costs more than the primitive)."""

    def failure() -> str:
        sch = new_schedule(mlp)
        with pytest.raises(s_tir.ScheduleError) as err:
            sch.compute_inline(sch.get_sblock("mm"))  # a reduction cannot be inlined
        return str(err.value)

    quiet = failure()
    with caplog.at_level(logging.DEBUG, logger="tvm_fusion_ext.target_dsa"):
        detailed = failure()
    assert 'sblock("mm")' in detailed and 'sblock("mm")' not in quiet


def test_a_declined_kernel_of_several_anchors_is_not_staged_per_kernel(monkeypatch):
    """The per-kernel staging tiles one anchor and recomputes the others' producers per tile:
    a planned kernel of two GEMMs the generator declines is declined (the judge splits it)
    without staging it per kernel, while a declined kernel of one anchor falls back to it."""
    from tvm_fusion_ext.target_dsa import schedule

    two = _two_layer_mlp(64, 32, 32)
    plan = SubgraphPlan(0, 4, (8, 1), (64, 32), options=VARIANTS["gb"]).to_json()
    monkeypatch.setattr(schedule, "subgraph_kernel", lambda *args: None)
    staged = []
    original = schedule.staged_kernel
    monkeypatch.setattr(schedule, "staged_kernel", lambda f, s: staged.append(f) or original(f, s))
    assert schedule.anchors(two) == 2 and schedule.anchors(mlp) == 1
    assert schedule.schedule_kernel(two, SPEC, plan) == (None, "declined")
    assert staged == []
    kernel, kind = schedule.schedule_kernel(mlp, SPEC, plan)
    assert kind == "scheduled" and kernel is not None and len(staged) == 1


@T.prim_func(s_tir=True)
def concat_relu(a: T.Buffer((2, 64, 4, 64), "float32"), b: T.Buffer((2, 64, 4, 64), "float32"),
                c: T.Buffer((2, 64, 4, 64), "float32"), d: T.Buffer((2, 64, 4, 64), "float32"),
                y: T.Buffer((2, 256, 4, 64), "float32")):
    cat = T.sblock_alloc_buffer((2, 256, 4, 64))
    for n, ch, h, w in T.grid(2, 256, 4, 64):
        with T.sblock("T_concat"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, ch, h, w])
            cat[vn, vc, vh, vw] = T.if_then_else(192 <= vc, d[vn, vc - 192, vh, vw], T.if_then_else(
                128 <= vc, c[vn, vc - 128, vh, vw], T.if_then_else(
                    64 <= vc, b[vn, vc - 64, vh, vw], a[vn, vc, vh, vw])))
    for n, ch, h, w in T.grid(2, 256, 4, 64):
        with T.sblock("relu"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, ch, h, w])
            y[vn, vc, vh, vw] = T.max(cat[vn, vc, vh, vw], T.float32(0))


def test_a_concatenation_is_tiled_along_its_whole_axis_and_loads_each_input_once():
    """A concatenation's tile loads every input's slice of the concatenated axis (TVM's regions
    are not narrowed by the select), so a tile of some of its 256 channels would load all four
    inputs per tile. One row of all channels (64 KB in, 64 KB out) exceeds LB, so the layer form
    also tiles the columns and keeps the whole axis: each input leaves DDR once."""
    plan = SubgraphPlan(dim=0, instances=1, binding=(1, 1, 1, 1), output_shape=(2, 256, 4, 64),
                        options=VARIANTS["gb"])
    staged = search.schedule_subgraph(concat_relu, SPEC, plan)
    assert staged.fits and staged.form == "layers"
    loaded = {}
    for phase in staged.model["phases"]:
        for event in phase["events"]:
            if event["kind"] == "dma" and event["src"] == "ddr":
                count = phase["instances"] * phase.get("repeat", 1)
                loaded[event["tensor"]] = loaded.get(event["tensor"], 0) + count * event["bytes"]
    assert loaded == dict.fromkeys("abcd", 2 * 64 * 4 * 64 * 4)


@T.prim_func(s_tir=True)
def pad_relu(x: T.Buffer((2, 8, 112, 112), "float32"), y: T.Buffer((2, 8, 114, 114), "float32")):
    padded = T.sblock_alloc_buffer((2, 8, 114, 114))
    for n, c, h, w in T.grid(2, 8, 114, 114):
        with T.sblock("pad"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            padded[vn, vc, vh, vw] = T.if_then_else(
                1 <= vh and vh < 113 and 1 <= vw and vw < 113, x[vn, vc, vh - 1, vw - 1], T.float32(0))  # noqa: PLR1716 (TVMScript)
    for n, c, h, w in T.grid(2, 8, 114, 114):
        with T.sblock("relu"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            y[vn, vc, vh, vw] = T.max(padded[vn, vc, vh, vw], T.float32(0))


def test_clipped_vars_are_the_padded_axes():
    blocks = {b.name_hint: b for b in _blocks(pad_relu.body)}
    pad, relu = blocks["pad"], blocks["relu"]
    assert staging.clipped_vars(pad, pad.reads[0]) == {"vh", "vw"}
    assert staging.clipped_vars(relu, relu.reads[0]) == frozenset()


def test_a_padding_split_along_its_rows_reads_its_input_in_place():
    """A padding's tile along the rows stages a copy of its input that TVM clips to the buffer
    with a ``T.where``, and ``CompactBufferAllocation`` allocates such a copy at all 112 rows
    (50 KB of one feature map, with a 52 KB map of output no tile fitted a 64 KB LB double
    buffered). The layer form reads a halo input a tile splits in place instead: the kernel fits,
    and the input is read once per output element (the guarded loads counted too), never staged."""
    plan = SubgraphPlan(dim=0, instances=1, binding=(1, 1, 1, 1), output_shape=(2, 8, 114, 114),
                        options=VARIANTS["full"])
    func = staging.stage_layers(pad_relu, SPEC, plan)
    model = kernel_model(func)
    assert fits(model, SPEC, reuse=True)
    assert model["footprint"]["lb_live_double_buffered"] <= SPEC.lb_bytes
    read = sum(p["instances"] * p.get("repeat", 1) * e.get("direct", {}).get("ddr", 0)
               for p in model["phases"] for e in p["events"] if e["kind"] == "compute")
    assert read == 2 * 8 * 114 * 114 * 4
    assert "x" not in _dma_tensors(model)


def test_gemm_tiles_include_every_multiple_of_the_matrix_unit():
    """A GEMM's tiled loops take multiples of the 16-wide matrix unit, and all of them are tried:
    48 among 768's (64 rows x 768 columns in tiles of 32 x 48: one per core of 32), 14 of
    3072's; a loop of any divisors keeps 8 spread over its range."""
    choices = staging.tile_choices([32, 768, 3072], (16, 16, 16))
    assert sorted({c[1] for c in choices}) == [16, 32, 48, 64, 96, 128, 192, 256, 384, 768]
    assert len({c[2] for c in choices}) == 14
    assert len({c[1] for c in staging.tile_choices([1, 720, 1], None)}) == staging.MAX_TILE_OPTIONS


@T.prim_func(s_tir=True)
def pad_then_window(x: T.Buffer((8, 16, 16), "float32"), y: T.Buffer((8, 16, 16), "float32")):
    p = T.sblock_alloc_buffer((8, 18, 18))
    for n, h, w in T.grid(8, 18, 18):
        with T.sblock("pad"):
            vn, vh, vw = T.axis.remap("SSS", [n, h, w])
            p[vn, vh, vw] = T.if_then_else(1 <= vh and vh < 17 and 1 <= vw and vw < 17,  # noqa: PLR1716 (TVMScript)
                                           x[vn, vh - 1, vw - 1], T.float32(0))
    for n, h, w, kh, kw in T.grid(8, 16, 16, 3, 3):
        with T.sblock("window"):
            vn, vh, vw, vkh, vkw = T.axis.remap("SSSRR", [n, h, w, kh, kw])
            with T.init():
                y[vn, vh, vw] = T.float32(0)
            y[vn, vh, vw] = y[vn, vh, vw] + p[vn, vh + vkh, vw + vkw]


def test_a_paddings_input_is_promoted_to_gb_per_instance():
    """A padding reads its input at the halo (``clipped_vars``): a tile splitting the halo reads
    it in place, so the input in DDR is promoted DDR -> GB per instance like a GEMM's activation
    (section 4.1), on every cluster and, with instruction scheduling, behind the instance before."""
    plan = SubgraphPlan(dim=0, instances=4, binding=(8, 1, 1), output_shape=(8, 16, 16))
    model = kernel_model(staging.stage_layers(pad_then_window, SPEC, plan, instances=4))
    prefetch = [p for p in model["phases"] if p.get("prefetch")]
    # Per instance and cluster: 2 images of x (2 * 16 * 16 * 4 B), DDR -> GB, on the 4 clusters.
    assert [(p["instances"], p["cores"], p["repeat"]) for p in prefetch] == [(4, SPEC.clusters, 4)]
    assert prefetch[0]["events"] == [{"kind": "dma", "src": "ddr", "dst": "gb", "bytes": 2048,
                                      "transfers": 1, "tensor": "x"}]


@T.prim_func(s_tir=True)
def _pieces_with_a_promotion(a: T.Buffer((8, 16), "float32"), w: T.Buffer((16,), "float32"),
                             b: T.Buffer((8, 16), "float32"), d: T.Buffer((8, 16), "float32")):
    w_gb = T.sblock_alloc_buffer((16,), scope="global.dsa_gb")
    c = T.sblock_alloc_buffer((8, 16))
    for j in range(16):
        with T.sblock("promote"):
            vj = T.axis.remap("S", [j])
            w_gb[vj] = w[vj]
    for i in range(8):
        for j in range(16):
            with T.sblock("scale"):
                vi, vj = T.axis.remap("SS", [i, j])
                c[vi, vj] = a[vi, vj] * w_gb[vj]
        for j in range(16):
            with T.sblock("shift"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = c[vi, vj] + w[vj]
        for j in range(16):
            with T.sblock("double"):
                vi, vj = T.axis.remap("SS", [i, j])
                d[vi, vj] = T.float32(2) * vj


@pytest.mark.parametrize(("block", "operand"), [("shift", "w"), ("scale", "w_gb")])
def test_a_windows_stage_added_at_the_root_goes_where_the_whole_function_puts_it(block, operand, monkeypatch):
    """A step that leaves an operand's stage at the root (a ``cache_read`` not moved into the
    pieces' loop) adds a root statement: at the start for a parameter, right before the loop for
    a buffer a root statement writes (TVM's ``CacheLocDetector``). The window (which leaves out
    the layer ``double``) is spliced with it in the same place: the result is the whole
    function's, and the step never ran on the whole function."""
    from tvm_fusion_ext.target_dsa import layer_windows
    from tvm_fusion_ext.target_dsa.layer_windows import LayerWindows

    scheduled = []

    def recording(func):
        scheduled.append({b.name_hint for b in _blocks(func.body)})
        return new_schedule(func)

    monkeypatch.setattr(layer_windows, "new_schedule", recording)

    func = _pieces_with_a_promotion
    piece = next(s for s in func.body.block.body.seq if isinstance(s, tirx.For) and s.loop_var.name == "i")

    def leave_at_root(sch, rvs, whole):
        index = [r.source.name for r in sch.get(rvs[0]).reads].index(operand)
        sch.cache_read(rvs[0], index, "local.dsa_lb", consumer_blocks=[rvs[0]])
        return sch

    staged = {}
    for windows in (True, False):
        layers = LayerWindows(func, piece.loop_var, windows)
        layers.stage([block], leave_at_root)
        staged[windows] = layers.func
        if windows:
            assert scheduled and all("double" not in names for names in scheduled)
    root = [{b.name_hint for b in _blocks(stmt)} for stmt in staged[True].body.block.body.seq]
    assert root.index({f"{operand}_local.dsa_lb"}) == (0 if operand == "w" else 1)
    tvm.ir.assert_structural_equal(staged[True], staged[False])

"""dsa/* target tags, spec presets and spec files."""

import json
import math

import pytest
import tvm
import tvm_ffi

import tvm_fusion_ext  # noqa: F401  (registers the tags)
from tvm_fusion_ext.hardware import spec_for_target
from tvm_fusion_ext.target_dsa import PRESETS, DSASpec, register_dsa_target


def test_stcp920_tag_after_import():
    target = tvm.target.Target("dsa/stcp920")
    assert "dsa" in list(target.keys) and target.kind.name == "c"
    spec = DSASpec.from_target(target)
    assert spec is spec_for_target(target)
    # GraphTurbo formula (2): d=4, c=8, u=3, LB 64 KB L1, GB 8 MB LLB, vector core + VME + MME.
    assert (spec.clusters, spec.cores_per_cluster, len(spec.units)) == (4, 8, 3)
    assert spec.lb_bytes == 64 * 1024 == spec.fast_memory_bytes
    assert spec.gb_bytes == 8 * 1024 * 1024
    assert [u.kind for u in spec.units] == ["vector", "vmac", "matrix"]
    assert spec.ddr_bandwidth == 136 * 10**9
    assert spec.num_cores == 32


@pytest.mark.parametrize("name", ["goya-like", "ascend-like"])
def test_illustrative_presets(name):
    spec = DSASpec.from_target(tvm.target.Target(f"dsa/{name}"))
    assert spec.illustrative and spec == PRESETS[name]


def test_spec_file_registers_a_new_tag(tmp_path):
    data = PRESETS["stcp920"].to_dict()
    data.update(name="my-chip", clusters=2, lb_bytes=128 * 1024)
    path = tmp_path / "my_chip.json"
    path.write_text(json.dumps(data))
    target = register_dsa_target("my-chip", path)
    assert str(target.attrs["mcpu"]) == "my-chip"
    spec = spec_for_target(tvm.target.Target("dsa/my-chip"))
    assert (spec.num_cores, spec.lb_bytes, spec.fast_memory_bytes) == (16, 128 * 1024, 128 * 1024)


def test_bad_spec_is_rejected():
    data = PRESETS["stcp920"].to_dict()
    data["units"] = [{"name": "mme", "kind": "matrix", "ops_per_cycle": 8}]
    with pytest.raises(ValueError, match="matrix_shape"):
        DSASpec.from_dict(data)


def _dlrm_gathers():
    """DLRM's two kinds of gathers (``take``) at batch 1024, as stock fuses them: an embedding
    lookup and the interaction's lower triangle."""
    from tvm import tirx

    from tvm_fusion_ext import zoo
    from tvm_fusion_ext.pipelines import fusion_pipeline

    mod = zoo.load("dlrm", zoo.parse_model_args("dlrm", ["batch=1024"])).relax("torch")
    target = tvm.target.Target("dsa/stcp920")
    with target:
        fused = fusion_pipeline("stock", target)(mod)
    takes = tvm.IRModule({gv: f for gv, f in fused.functions_items()
                          if isinstance(f, tirx.PrimFunc) and gv.name_hint.startswith("take")})
    assert len(takes.functions) == 2
    return takes


def test_gathers_are_staged_with_their_tables_read_in_place():
    """A gather's table slice is only known once its indices are loaded: DSASchedule stages the
    indices and the output but reads the table in place (staging it used to fail compute_at's
    InverseAffineIterMap check on DLRM's batch-1024 gathers, and at small shapes copied the slice
    before its index was loaded)."""
    from tvm import s_tir

    from tvm_fusion_ext.target_dsa.schedule import DSASchedule
    from tvm_fusion_ext.target_dsa.target import spec_of_target

    schedule = DSASchedule(spec_of_target("dsa/stcp920"))
    out = schedule(_dlrm_gathers())
    assert schedule.stats == {"scheduled": 2, "declined": 0, "graphturbo": 0}
    for _, func in out.functions_items():
        table = func.params[0]  # TVM 0.27: PrimFunc params are the buffers
        blocks = []
        tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)])
        readers = [b.name_hint for b in blocks if any(r.source.same_as(table) for r in b.reads)]
        assert len(readers) == 1 and not readers[0].endswith("dsa_lb"), readers  # the gather itself


def test_a_kernel_tvm_cannot_stage_is_declined_not_a_crash(monkeypatch):
    """A TVM primitive failing an internal check while staging (a RuntimeError, as compute_at's
    InverseAffineIterMap did on DLRM's gathers): DSASchedule leaves that kernel unstaged and
    schedules the rest, instead of failing the compile."""
    from tvm_fusion_ext.target_dsa import schedule as dsa_schedule
    from tvm_fusion_ext.target_dsa.target import spec_of_target

    takes = _dlrm_gathers()
    first, second = sorted(gv.name_hint for gv in takes.functions)
    staged = dsa_schedule.staged_kernel  # memoised: a kernel staged before would not fail again

    def failing(func, spec):
        if func.same_as(takes[first]):
            raise RuntimeError("InternalError: Check failed: InverseAffineIterMap")
        return staged(func, spec)

    monkeypatch.setattr(dsa_schedule, "staged_kernel", failing)
    monkeypatch.setattr(dsa_schedule, "_KERNELS", {})  # nor a kernel generated before
    schedule = dsa_schedule.DSASchedule(spec_of_target("dsa/stcp920"))
    out = schedule(takes)
    assert schedule.stats["declined"] == 1 and schedule.stats["scheduled"] == 1
    scheduled = {gv.name_hint: bool(f.attrs and f.attrs.get("tirx.is_scheduled"))
                 for gv, f in out.functions_items()}
    assert scheduled == {first: False, second: True}


def test_a_kernel_that_fits_nowhere_gets_the_fastest_spilled_tiles_not_the_most():
    """A concatenation of DenseNet's kind (eight inputs, then ReLU) fits LB with no tile: the
    untuned choice is the tile that simulates fastest among those giving every core one, since
    its tiles along the channels each load every input's region again."""
    from tvm import relax

    from tvm_fusion_ext.target_dsa.schedule import (
        MAX_TILE_CANDIDATES,
        Decisions,
        default_decisions,
        evaluate,
        output_shape,
        tile_candidates,
    )
    from tvm_fusion_ext.target_dsa.simulator import kernel_cycles

    bb = relax.BlockBuilder()
    parts = [relax.Var(f"x{i}", relax.TensorType((32, 64, 14, 14), "float32")) for i in range(8)]
    with bb.function("main", parts):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.concat(parts, axis=1))))
        bb.emit_func_output(out)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
        relax.transform.LegalizeOps()(bb.get()))))
    func = next(f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    spec = DSASpec.from_target(tvm.target.Target("dsa/stcp920"))
    chosen = default_decisions(func, spec)
    _, model, _ = evaluate(func, spec, chosen)
    tiles = tile_candidates(output_shape(func))[:MAX_TILE_CANDIDATES]
    most = min(tiles, key=math.prod)  # the most tiles: the former choice when nothing fits
    _, most_model, _ = evaluate(func, spec, Decisions(most, None, True, True, spec.num_cores))
    assert chosen.tile != most
    assert kernel_cycles(model, spec) < kernel_cycles(most_model, spec)


def test_a_channel_shuffle_builds_and_computes_the_same_numbers():
    """ShuffleNetV2's channel shuffle (two branches concatenated, split into groups, the groups
    transposed): staged per tile, the concatenation's inputs were read through ``floormod`` of
    the split channel, and TVM's buffer compaction gave their LB copies an offset in a loop
    variable of another scope, so the kernel failed to build (``MakePackedAPI``: ``ax1`` used
    before its definition) under ``stock``, the dominator strategies and APOLLO. The tile search
    skips a tile whose staged kernel does not survive compaction
    (``tir_passes.analysis.compacts_well_formed``)."""
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tvm_fusion_ext.testing import differential

    @I.ir_module
    class ChannelShuffle:
        @R.function
        def main(a: R.Tensor((1, 58, 4, 4), "float32"), b: R.Tensor((1, 58, 4, 4), "float32")):
            with R.dataflow():
                groups = R.reshape(R.concat((a, b), axis=1), (1, 2, 58, 4, 4))
                out = R.reshape(R.permute_dims(groups, (0, 2, 1, 3, 4)), (1, 116, 4, 4))
                R.output(out)
            return out

    result = differential.check_module(ChannelShuffle, ["stock", "apollo"], targets=("dsa/stcp920",))
    assert result.checked == 2 and not result.failures, result.failures

"""``tvm-fusion compare``: the JSON shape other tools read, model files, and one-line errors."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tvm_fusion_ext.cli import main

pytestmark = pytest.mark.zoo

ROW_KEYS = {"fusion": str, "kernels": int, "boundary_bytes": int, "compile_s": float, "latency_ms": float,
            "max_abs_err": float, "speedup_vs_stock": float, "latency_rounds_ms": list}
SMALL_ARGS = ["--model-arg", "batch=4", "--model-arg", "features=64"]


def _compare(tmp_path, *argv):
    out = tmp_path / "r.json"
    assert main(["compare", *argv, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def _check_shape(report, fusions):
    assert set(report) == {"model", "policy", "machine", "rows"}
    assert isinstance(report["machine"], str) and report["machine"]
    assert [row["fusion"] for row in report["rows"]] == fusions
    for row in report["rows"]:
        assert set(row) == set(ROW_KEYS)
        reference = row["fusion"] in ("torch", "onnxruntime")
        for key, kind in ROW_KEYS.items():
            if reference and key in ("kernels", "boundary_bytes", "compile_s") and row[key] is None:
                continue
            assert isinstance(row[key], kind), (row["fusion"], key, row[key])
        assert row["latency_ms"] > 0 and row["max_abs_err"] < 1e-3


def test_zoo_model_json_shape_with_reference_rows(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    report = _compare(tmp_path, "--model", "apollo_fig3", *SMALL_ARGS,
                      "--fusion", "none,stock,torch,onnxruntime")
    _check_shape(report, ["none", "stock", "torch", "onnxruntime"])
    assert report["model"] == "apollo_fig3" and report["policy"] == "untuned"
    none, stock, torch_row, _ = report["rows"]
    assert stock["speedup_vs_stock"] == 1.0
    assert stock["kernels"] < none["kernels"] and stock["boundary_bytes"] < none["boundary_bytes"]
    assert torch_row["kernels"] is None and torch_row["boundary_bytes"] is None
    assert torch_row["max_abs_err"] == 0.0                    # PyTorch is the reference
    from tvm_fusion_ext import zoo
    from tvm_fusion_ext.pipelines import fusion_pipeline
    from tvm_fusion_ext.testing.verify import kernel_traffic

    mod = zoo.load("apollo_fig3", {"batch": 4, "features": 64}).relax("torch")
    for row in (none, stock):                                 # read off the module that was compiled
        traffic = kernel_traffic(fusion_pipeline(row["fusion"])(mod))
        assert (row["kernels"], row["boundary_bytes"]) == (traffic.kernels, traffic.boundary_bytes)
    table = capsys.readouterr().out
    assert "speedup vs stock" in table and "onnxruntime" in table
    # three rounds by default, every row timed once per round, their spread printed
    assert all(len(row["latency_rounds_ms"]) == 3 for row in report["rows"])
    assert "spread of the 3 round medians" in table


def test_onnx_file_uses_onnxruntime_reference(tmp_path):
    pytest.importorskip("onnxruntime")
    from tvm_fusion_ext import zoo

    path = tmp_path / "model.onnx"
    path.write_bytes(zoo.load("multi_tail", {"batch": 4, "features": 64}).onnx_bytes())
    report = _compare(tmp_path, "--model", str(path), "--fusion", "stock,onnxruntime")
    _check_shape(report, ["stock", "onnxruntime"])
    assert report["rows"][1]["max_abs_err"] == 0.0             # ONNX Runtime is the reference


def test_saved_exported_program(tmp_path):
    torch = pytest.importorskip("torch")
    from tvm_fusion_ext import zoo

    path = tmp_path / "lltm.pt2"
    torch.export.save(zoo.load("lltm", {"batch": 4}).exported_program(), str(path))
    report = _compare(tmp_path, "--model", str(path), "--fusion", "stock,torch", "--policy", "unscheduled")
    _check_shape(report, ["stock", "torch"])
    assert report["policy"] == "unscheduled"


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet19"], "unknown model 'resnet19'"),
    (["--model", "apollo_fig3", "--fusion", "stock,bogus"], "unknown fusion strategy 'bogus'"),
    (["--model", "apollo_fig3", "--model-arg", "depth=3"], "has no argument 'depth'"),
    (["--model", "apollo_fig3", "--target", "nosuchtarget"], "bad target"),
    (["--model", "missing.onnx"], "no such file"),
])
def test_user_errors_are_one_line(argv, message, capsys):
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_malformed_onnx_is_one_line(tmp_path, capsys):
    pytest.importorskip("onnx")
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf model\xff\xff")
    assert main(["compare", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a valid ONNX model" in err


def test_console_script_exits_nonzero_without_traceback():
    script = shutil.which("tvm-fusion", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "tvm_fusion_ext.cli"]
    result = subprocess.run([*command, "compare", "--model", "no_such_model", "--fusion", "stock"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "Traceback" not in result.stderr


def test_dsa_target_rows_carry_the_simulated_profile(tmp_path):
    pytest.importorskip("torch")
    report = _compare(tmp_path, "--model", "apollo_fig3", "--model-arg", "batch=4", "--model-arg",
                      "features=32", "--fusion", "none,stock", "--target", "dsa/stcp920")
    none, stock = report["rows"]
    for row in (none, stock):
        profile = row["dsa"]
        assert set(profile) == {"kernels", "ddr_bytes", "gb_bytes", "lb_bytes", "buffers",
                                "movement_bytes", "cycles", "time_ms", "unit_busy"}
        assert row["latency_ms"] == profile["time_ms"] > 0 and row["max_abs_err"] < 1e-4
        assert profile["kernels"] == row["kernels"]
    assert stock["dsa"]["ddr_bytes"] < none["dsa"]["ddr_bytes"]  # fusion removes DDR round trips


def test_plot_draws_one_bar_per_row_scaled_by_latency(tmp_path):
    import xml.etree.ElementTree as ET

    chart = tmp_path / "c.svg"
    report = _compare(tmp_path, "--model", "apollo_fig3", *SMALL_ARGS, "--fusion", "none,stock",
                      "--plot", str(chart))
    root = ET.parse(chart).getroot()
    bars = [e for e in root.iter() if e.tag.endswith("rect") and "bar" in e.get("class", "")]
    assert len(bars) == 2
    widths = [float(bar.get("width")) for bar in bars]
    latencies = [row["latency_ms"] for row in report["rows"]]
    # widths are written to 0.1 px: allow that rounding (bars are short when one round was slow)
    rounding = 0.05 / widths[1] + 0.05 * widths[0] / widths[1] ** 2
    assert abs(widths[0] / widths[1] - latencies[0] / latencies[1]) < 1e-2 + rounding
    assert len([e for e in root.iter() if e.get("class") == "spread"]) == 2   # one whisker per row


def test_plot_into_a_missing_directory_fails_before_compiling(tmp_path, capsys):
    assert main(["compare", "--model", "apollo_fig3", "--plot", str(tmp_path / "no" / "c.svg")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_demo_times_draws_and_simulates_every_strategy(tmp_path, capsys):
    """``make demo``'s command on a small softmax chain: the CPU table with the reference rows,
    the DSA table with simulated cycles per strategy, and the two drawings where it says."""
    out_dir = tmp_path / "demo"
    assert main(["demo", "--model-arg", "heads=2", "--model-arg", "seq=32", "--rounds", "1",
                 "--out-dir", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    cpu, dsa = printed.split("[2/3]")[0], printed.split("[2/3]")[1].split("[3/3]")[0]
    for row in ("none", "stock", "dominator-both", "apollo", "neoflow", "graphturbo", "torch", "onnxruntime"):
        assert f"\n{row} " in cpu
    dsa_rows = [line.split() for line in dsa.splitlines() if line.split() and line.split()[0] in
                ("none", "stock", "dominator-both", "apollo", "neoflow", "graphturbo")]
    assert len(dsa_rows) == 6 and all(int(cells[2]) > 0 for cells in dsa_rows)
    assert next(cells for cells in dsa_rows if cells[0] == "stock")[-1] == "1.00x"
    best = printed.split("fastest strategy: ")[1].split(",")[0]
    assert (out_dir / "latency.svg").exists() and (out_dir / f"{best}.svg").exists()
    assert f"wrote {out_dir / (best + '.svg')}" in printed


def test_rows_are_timed_in_interleaved_turns():
    """``measure_interleaved_ms`` times rows in turns of ``INTERLEAVE_CALLS`` calls (after one
    untimed call), so a change of machine speed during a round hits every row alike."""
    from tvm_fusion_ext.driver.evaluation import INTERLEAVE_CALLS, measure_interleaved_ms

    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    latencies = measure_interleaved_ms(fns, warmup=1, min_runs=3 * INTERLEAVE_CALLS, min_seconds=0.0)
    assert set(latencies) == {"a", "b"} and all(v >= 0 for v in latencies.values())
    timed = calls[4:]  # warm-up and the one estimating call of each row come first
    turns = [timed[i:i + INTERLEAVE_CALLS + 1] for i in range(0, len(timed), INTERLEAVE_CALLS + 1)]
    assert [turn[0] for turn in turns] == ["a", "b"] * 3
    assert all(len(set(turn)) == 1 for turn in turns)


def test_rows_with_more_calls_share_every_turn_with_the_others():
    """A fast row gets more calls than a slow one; they are spread over the same turns, so the
    slow row is timed until the end of the round too, never one call at a time."""
    from tvm_fusion_ext.driver.evaluation import INTERLEAVE_CALLS, measure_interleaved_ms

    calls = []
    fns = {"slow": lambda: (time.sleep(0.004), calls.append("slow")),
           "fast": lambda: calls.append("fast")}
    measure_interleaved_ms(fns, warmup=1, min_runs=2 * INTERLEAVE_CALLS, min_seconds=0.02, max_runs=40)
    timed = "".join("s" if c == "slow" else "f" for c in calls[4:])
    # two turns: the slow row's calls, then half of the fast row's, twice; each turn of a row
    # starts with an untimed call
    assert timed == ("s" * (INTERLEAVE_CALLS + 1) + "f" * 21) * 2


def test_speedup_over_rounds_is_the_median_of_the_per_round_ratios():
    from tvm_fusion_ext.driver.evaluation import speedup

    # The host slowed down for the last rounds; the base row's median fell among the slow
    # rounds, the other row's among the fast ones: per round, the rows are equally fast.
    base, row = [4.4, 4.6, 5.8, 6.1, 6.0], [4.3, 4.4, 4.3, 6.0, 6.0]
    assert speedup(5.8, 4.4, base, row) == pytest.approx(1.02, abs=0.01)
    assert speedup(5.8, 4.4) == pytest.approx(5.8 / 4.4)
    assert speedup(5.8, 4.4, base, row[:3]) == pytest.approx(5.8 / 4.4)  # not the same rounds

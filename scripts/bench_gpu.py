#!/usr/bin/env python
"""Full-size GPU benchmark: every strategy against PyTorch eager and ``torch.compile`` on the same
CUDA GPU, with the CUDA kernels each row launches per inference.

    python scripts/bench_gpu.py                                  # the default matrix
    python scripts/bench_gpu.py --models "bert_base:seq=128;batch=1,multi_head" \\
        --fusion none,stock,apollo,torch,torch-compile --json docs/benchmarks/gpu.json \\
        --markdown docs/benchmarks.md

A workload is ``name`` or ``name:key=value;key=value`` (zoo arguments). Every workload is one
``compare()`` run in a process of its own: up to ``--jobs`` of them compile at once, then, once all
have compiled, they time one after another, so no timing overlaps a compile. Within a workload the
rows are timed round-robin over ``--rounds`` rounds; ratios are read within one workload's run.
The target is the GPU's own architecture (``sm_90`` on an H100) unless ``--target`` names one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_MODELS = ("bert_base:seq=128;batch=1,bert_base:seq=128;batch=32,bert_base:seq=512;batch=1,"
                  "bert_base:seq=512;batch=32,resnet50:batch=1,resnet50:batch=64,vit:batch=1,"
                  "mobilenet_v2:batch=1,apollo_fig3,layernorm_chain,softmax_chain,multi_head,multi_tail")
SECTION_BEGIN, SECTION_END = "<!-- bench_gpu:begin -->", "<!-- bench_gpu:end -->"
REFERENCE_GPU_ROWS = ("torch", "torch-compile")


def parse_args(argv=None) -> argparse.Namespace:
    from tvm_fusion_ext import fusion_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"default: {DEFAULT_MODELS}")
    parser.add_argument("--fusion", default=",".join([*fusion_names(), *REFERENCE_GPU_ROWS]),
                        help="rows (default: every strategy, torch, torch-compile)")
    parser.add_argument("--target", default=None, help="CUDA target JSON (default: this GPU's arch)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="workloads compiling at once (default: half the logical CPUs)")
    parser.add_argument("--no-cost-check", dest="cost_check", action="store_false",
                        help="each paper's groups as written (no profitability check), for ablations")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="TVM rows replay CUDA graphs of their kernel launches (driver.build.cuda_graphs)")
    parser.add_argument("--json", help="write every report here")
    parser.add_argument("--markdown", help="replace the bench_gpu section of this file (e.g. docs/benchmarks.md)")
    return parser.parse_args(argv)


def workloads(models: str) -> list[tuple[str, str, list[str]]]:
    """``(label, zoo name, zoo arguments)`` of every workload in ``models``."""
    from tvm_fusion_ext.driver.evaluation import parse_model_spec

    found = []
    for item in filter(None, (m.strip() for m in models.split(","))):
        name, args = parse_model_spec(item)
        found.append((f"{name} ({', '.join(args)})" if args else name, name, args))
    return found


def gpu_target() -> dict:
    """The CUDA target of this machine's first GPU."""
    import tvm

    device = tvm.cuda()
    if not device.exist:
        raise SystemExit("bench_gpu: no CUDA GPU on this machine (tvm.cuda().exist is false)")
    return {"kind": "cuda", "arch": "sm_" + device.compute_version.replace(".", "")}


class TimingTurn:
    """``compare``'s timing phase in a worker: give back the compile slot, wait until every worker
    has compiled (barrier), then time while holding the one timing lock."""

    def __init__(self, compile_slots, barrier, lock):
        self.compile_slots, self.barrier, self.lock = compile_slots, barrier, lock
        self.reached = False

    def arrive(self) -> None:
        """Leave the compile phase (once): free the slot and wait for every other worker."""
        if not self.reached:
            self.reached = True
            self.compile_slots.release()
            self.barrier.wait()

    def __enter__(self):
        self.arrive()
        self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False


def run_workload(label, model, model_args, fusions, target, rounds, cost_check, cuda_graph,
                 turn: TimingTurn, out_path):
    """One workload's ``compare`` in a worker process (its TVM rows built with CUDA graphs when
    ``cuda_graph``); its report (or error) goes to ``out_path``."""
    turn.compile_slots.acquire()
    result = {"label": label}
    start = time.time()
    try:
        import contextlib

        from tvm_fusion_ext.driver.build import cuda_graphs
        from tvm_fusion_ext.driver.evaluation import compare, load_workload

        workload = load_workload(model, model_args)
        with cuda_graphs() if cuda_graph else contextlib.nullcontext():
            report = compare(workload, fusions, target, "untuned", rounds=rounds, progress=False,
                             cost_check=cost_check, timing_phase=turn)
        result["rows"] = [row.to_json() for row in report.rows]
        result["table"] = report.table()
        print(f"\n{label} (timed)\n{result['table']}", flush=True)  # survives a run cut short
    except Exception as err:  # noqa: BLE001 - one failing workload must not lose the others' rows
        result["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        result["traceback"] = traceback.format_exc()
    finally:
        turn.arrive()
    result["seconds"] = round(time.time() - start, 1)
    with open(out_path, "w") as f:
        json.dump(result, f)


def markdown(results: list[dict], command: str, gpu: str, commit: str, cuda_graph: bool = False) -> str:
    graphs = ", replaying CUDA graphs" if cuda_graph else ""
    lines = [SECTION_BEGIN, "## Full-size models on an NVIDIA GPU (`scripts/bench_gpu.py`)", "",
             (f"Commit `{commit}`, {gpu}; untuned (TVM rows: each strategy's kernels under the CUDA "
              f"backend's default schedule{graphs}); latency per inference, synchronised, median of the "
              "round medians."), "", f"<sub>`{command}`</sub>", ""]
    for result in results:
        if "error" in result:
            lines += [f"### {result['label']}", "", f"failed: `{result['error']}`", ""]
            continue
        rows = result["rows"]
        by_name = {r["fusion"]: r["latency_ms"] for r in rows}
        columns = ["stock", *[ref for ref in REFERENCE_GPU_ROWS if ref in by_name]]
        lines += [f"### {result['label']}", "",
                  "| row | launches | latency ms | " + " | ".join(f"vs {c}" for c in columns) + " |",
                  "|---|---:|---:|" + "---:|" * len(columns)]
        for r in rows:
            ratios = [f"{by_name[c] / r['latency_ms']:.2f}x" if c in by_name else "-" for c in columns]
            lines.append(f"| {r['fusion']} | {r.get('launches') or '-'} | {r['latency_ms']:.3f} | "
                         + " | ".join(ratios) + " |")
        lines.append("")
    lines.append(SECTION_END)
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    target = json.loads(args.target) if args.target else gpu_target()
    import tvm

    from tvm_fusion_ext.driver.evaluation import parse_fusions
    from tvm_fusion_ext.driver.markdown import replace_section

    fusions = parse_fusions(args.fusion)
    jobs = workloads(args.models)
    gpu = tvm.cuda().device_name if tvm.cuda().exist else "no GPU (target " + json.dumps(target) + ")"
    out_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_gpu_{os.getpid()}")
    os.makedirs(out_dir, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    turn = TimingTurn(context.Semaphore(max(1, args.jobs)), context.Barrier(len(jobs)), context.Lock())
    print(f"{gpu}, target {json.dumps(target)}: {len(jobs)} workloads x {len(fusions)} rows, "
          f"{args.jobs} compiling at once", flush=True)
    workers = []
    for index, (label, model, model_args) in enumerate(jobs):
        path = os.path.join(out_dir, f"{index}.json")
        worker = context.Process(target=run_workload, args=(label, model, model_args, fusions, target,
                                                             args.rounds, args.cost_check, args.cuda_graph, turn, path))
        worker.start()
        workers.append((worker, path, label))
    while any(worker.is_alive() for worker, _, _ in workers):
        if any(worker.exitcode not in (None, 0) for worker, _, _ in workers):
            turn.barrier.abort()  # a worker died before the barrier: the others must not wait for it
        time.sleep(1)
    results = []
    for worker, path, label in workers:
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
        else:
            results.append({"label": label, "error": f"worker exited with code {worker.exitcode}"})
        result = results[-1]
        print(f"\n{label}: " + (f"failed: {result['error']}\n{result.get('traceback', '')}" if "error" in result
                                  else f"{result['seconds']} s\n{result['table']}"), flush=True)
        launches = {r["fusion"]: r.get("launches") for r in result.get("rows", []) if r.get("launches")}
        if launches:
            print("launches per inference: " + ", ".join(f"{k} {v}" for k, v in launches.items()), flush=True)
    command = "python scripts/bench_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv)
    # BENCH_COMMIT names the commit where the tree was copied without its history (a GPU machine)
    commit = os.environ.get("BENCH_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "target": target, "commit": commit, "date": datetime.date.today().isoformat(),
                       "command": command, "cuda_graph": args.cuda_graph, "results": results}, f, indent=1)
    if args.markdown:
        replace_section(args.markdown, markdown(results, command, gpu, commit, args.cuda_graph),
                        SECTION_BEGIN, SECTION_END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

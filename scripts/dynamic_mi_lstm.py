"""NeoFlow dynamic mode (section 6, Fig. 8 solution 3) on the MI-LSTM cell.

    .venv/bin/python scripts/dynamic_mi_lstm.py [--fusion neoflow] [--trials 8] [--rounds 2]
        [--start untuned|unscheduled] [--seconds 600] [--every 1.0] [--batch 16 ...]

The cell (zoo ``mi_lstm``) is fused by ``--fusion`` and starts running at once with ``--start``
schedules, as an inference loop fed its own hidden state (MetaSchedule's one-time start-up runs
first unless ``--cold``); MetaSchedule tunes its kernels in a
background thread and each better kernel is swapped in through the function cache. Every
``--every`` seconds the script prints the iteration count and the median latency of the iterations
in that window, plus each swap as it happens, so the latency can be seen falling over time. It stops
``--tail`` seconds after the tuner finishes (or after ``--seconds``) and checks the last step
against PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import tvm

from tvm_fusion_ext import zoo
from tvm_fusion_ext.pipelines import fusion_pipeline
from tvm_fusion_ext.runtime.dynamic import DynamicRunner
from tvm_fusion_ext.testing.verify import assert_allclose_by_dtype


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusion", default="neoflow")
    parser.add_argument("--start", default="untuned", choices=["untuned", "unscheduled"])
    parser.add_argument("--trials", type=int, default=8, help="MetaSchedule trials per kernel per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long at most")
    parser.add_argument("--tail", type=float, default=5.0, help="keep running after tuning ends")
    parser.add_argument("--every", type=float, default=1.0, help="report interval in seconds")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--input-size", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--cold", action="store_true",
                        help="leave MetaSchedule's one-time start-up to the tuning thread")
    args = parser.parse_args()

    model = zoo.load("mi_lstm", {"batch": args.batch, "input_size": args.input_size,
                                 "hidden_size": args.hidden_size})
    target = tvm.target.Target("llvm")
    t0 = time.perf_counter()
    with target:
        fused = fusion_pipeline(args.fusion, target)(model.relax("torch"))
    runner = DynamicRunner(fused, target, policy=args.start)
    print(f"compiled {len(runner.kernels)} kernels ({args.fusion}, {args.start} schedules) "
          f"in {time.perf_counter() - t0:.1f} s")
    for name, entry in runner.cache.entries.items():
        print(f"  {name}: {entry.latency * 1e6:.1f} us")
    if not args.cold:
        print(f"MetaSchedule start-up (tensor intrinsics import): {runner.warm_up():.1f} s")
    print("starting the loop")

    x, h, cell = model.numpy_inputs()
    x_t = tvm.runtime.tensor(x)
    h_t, c_t = tvm.runtime.tensor(h), tvm.runtime.tensor(cell)
    runner.start_tuning(trials_per_round=args.trials, rounds=args.rounds)
    start = last_report = time.perf_counter()
    window, iteration, seen_events, tuned_at = [], 0, 0, None
    while True:
        t = time.perf_counter()
        prev_h, prev_c = h_t, c_t
        h_t, c_t = runner.run(x_t, prev_h, prev_c)
        window.append(time.perf_counter() - t)
        iteration += 1
        now = time.perf_counter()
        for event in runner.cache.events[seen_events:]:
            print(f"  [{event.time - start:7.1f} s] swapped {event.kernel}: "
                  f"{event.old_latency * 1e6:.1f} -> {event.new_latency * 1e6:.1f} us ({event.source})")
        seen_events = len(runner.cache.events)
        if now - last_report >= args.every:
            print(f"[{now - start:7.1f} s] iteration {iteration:7d}: "
                  f"{statistics.median(window) * 1e3:.3f} ms/iteration")
            window, last_report = [], now
        if tuned_at is None and runner.wait(0):
            tuned_at = now
            print(f"[{now - start:7.1f} s] tuning finished"
                  + (f" with an error: {runner.tuning_error}" if runner.tuning_error else ""))
        if (tuned_at is not None and now - tuned_at >= args.tail) or now - start >= args.seconds:
            break
    runner.stop()

    # the last step against PyTorch, from the same previous state
    with torch.no_grad():
        expected = zoo.flatten_outputs(model.module(torch.from_numpy(x),
                                                    torch.from_numpy(prev_h.numpy()),
                                                    torch.from_numpy(prev_c.numpy())))
    assert_allclose_by_dtype([h_t.numpy(), c_t.numpy()], expected, context="dynamic MI-LSTM")
    print(f"{iteration} iterations, {len(runner.cache.events)} kernel swaps; last step matches "
          f"PyTorch (max abs error {np.max(np.abs(h_t.numpy() - expected[0])):.2e})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""CPU models with and without ``ChannelsLast`` (the CPU backend's NHWC conversion of networks with
depthwise convs), timed in turns within one process.

    .venv/bin/python scripts/bench_channels_last.py --models mobilenet_v2,efficientnet_b0 --fusion stock
    .venv/bin/python scripts/bench_channels_last.py --models resnet18,densenet121 --force
    .venv/bin/python scripts/bench_channels_last.py --models mobilenet_v2.onnx   # a model file

The ``nchw`` variant compiles with the CPU backend's graph passes minus ``ChannelsLast``; the
``nhwc`` variant with them, and with ``--force`` converts every model (also those ``ChannelsLast``
leaves in NCHW, to measure what its rule avoids). Both variants of a model are timed round-robin
(:func:`~tvm_fusion_ext.driver.evaluation.measure_interleaved_ms`). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tvm
from tvm import relax

from tvm_fusion_ext.backends.cpu import CPUBackend
from tvm_fusion_ext.driver.build import build, max_rel_error, run
from tvm_fusion_ext.driver.evaluation import (
    configure_threads,
    load_workload,
    machine_description,
    measure_interleaved_ms,
    parse_model_spec,
    parse_target,
)
from tvm_fusion_ext.relax_passes.channels_last import ChannelsLast


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_b0")
    parser.add_argument("--fusion", default="stock")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--force", action="store_true", help="convert every model, whatever ChannelsLast's rule says")
    args = parser.parse_args(argv)
    threads = configure_threads(args.threads)
    target = parse_target("llvm")
    print(f"# {machine_description(threads)}; strategy {args.fusion}")
    default = CPUBackend.graph_passes

    def without_layout(self, target):
        return [p for p in default(self, target) if not isinstance(p, ChannelsLast)]

    def with_layout(self, target):
        return [ChannelsLast(force=True) if isinstance(p, ChannelsLast) and args.force else p
                for p in default(self, target)]

    for spec in args.models.split(","):
        name, extra = parse_model_spec(spec)
        workload = load_workload(name, None if os.path.isfile(name) else ["batch=1", *extra])
        runs, notes = {}, {}
        for variant, graph_passes in (("nchw", without_layout), ("nhwc", with_layout)):
            CPUBackend.graph_passes = graph_passes
            start = time.perf_counter()
            executable = build(workload.mod, args.fusion, target)
            compile_s = time.perf_counter() - start
            error = max_rel_error(run(executable, workload.inputs), workload.expected)
            vm = relax.VirtualMachine(executable, tvm.cpu())
            inputs = [tvm.runtime.tensor(x) for x in workload.inputs]
            runs[variant] = lambda vm=vm, inputs=inputs: vm["main"](*inputs)
            notes[variant] = f"compile {compile_s:.1f} s, rel. error {error:.1e}"
        CPUBackend.graph_passes = default
        times = measure_interleaved_ms(runs)
        print(f"{spec}: nchw {times['nchw']:.3f} ms ({notes['nchw']}), nhwc {times['nhwc']:.3f} ms "
              f"({notes['nhwc']}): nhwc {times['nchw'] / times['nhwc']:.3f}x", flush=True)


if __name__ == "__main__":
    main()

"""Dynamic mode (NeoFlow section 6, Fig. 8 solution 3): the loop runs at once, a kernel tuned in the
background is swapped in through the function cache while it runs, and results stay correct."""

import time

import numpy as np
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_fusion_ext.pipelines import fusion_pipeline
from tvm_fusion_ext.runtime.dynamic import CacheEntry, DynamicRunner, FunctionCache

DEADLINE_S = 600  # generous: MetaSchedule start-up alone is 20+ s on a quiet 2-core machine


@I.ir_module
class MatmulRelu:
    # 256 x 256: the unscheduled kernel walks ``w`` down its columns (about 15 ms on a Zen 4 core),
    # so any tiled candidate of a four-trial round beats it; at 128 x 128 the naive loop nest runs
    # from L2 (1.3 ms) and random candidates measured while the loop runs can tie with it.
    @R.function
    def main(x: R.Tensor((256, 256), "float32"), w: R.Tensor((256, 256), "float32")):
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            R.output(y)
        return y


def test_cache_keeps_only_faster_versions():
    cache = FunctionCache()
    cache.put("k", CacheEntry(function=None, latency=2.0, source="default"))
    assert not cache.offer("k", CacheEntry(function=None, latency=3.0, source="slower"))
    assert cache.offer("k", CacheEntry(function=None, latency=1.0, source="faster"))
    entry = cache.get("k")
    assert (entry.source, entry.version) == ("faster", 1) and len(cache.events) == 1


def test_kernel_swapped_while_running():
    with tvm.target.Target("llvm"):
        fused = fusion_pipeline("stock")(MatmulRelu)
    runner = DynamicRunner(fused, "llvm", policy="unscheduled")
    (kernel,) = runner.kernels
    rng = np.random.default_rng(0)
    x, w = (rng.uniform(-1, 1, (256, 256)).astype("float32") for _ in range(2))
    expected = np.maximum(x @ w, 0)
    args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w)]

    runner.start_tuning(trials_per_round=4, rounds=2)  # two rounds: robust to one unlucky sample
    versions = []
    start = time.monotonic()
    while time.monotonic() - start < DEADLINE_S:
        done = runner.wait(0)
        versions.append(runner.cache.get(kernel).version)
        np.testing.assert_allclose(runner.run(*args).numpy(), expected, rtol=1e-4, atol=1e-3)
        time.sleep(0.005)  # a training loop does other Python work too; leave the tuner the GIL
        if done:
            break
    runner.stop()
    assert runner.tuning_error is None
    assert versions[0] == 0 and versions[-1] >= 1, "no tuned kernel was swapped in"
    assert versions.index(versions[-1]) > 0  # the swap happened while the loop was running
    assert runner.cache.events  # one swap per round that found a faster version
    for event in runner.cache.events:
        assert event.kernel == kernel and event.new_latency < event.old_latency

#!/bin/bash
# Every GPU check of the project in one bounded run, for a machine with an NVIDIA GPU that is lent
# for minutes: the GPU-only tests, the zoo's numerics under every strategy, the full-size
# benchmark (BERT and ResNet-50 again with CUDA graphs) and ViT's per-kernel times, each phase cut
# at its share of BUDGET seconds, every log and JSON written to OUT_DIR as it goes (a phase cut
# short keeps what it printed).
#
#     scripts/gpu_checks.sh OUT_DIR [BUDGET_SECONDS]        # default budget 540 s
#
# Run from the repository root with python3 holding PyTorch for CUDA, and TVM importable, or with
# TVM_BUNDLE naming a folder scripts/bundle_tvm.sh wrote (unpacked to /tmp/tvm_site first).
set -u -o pipefail
out=${1:?usage: scripts/gpu_checks.sh OUT_DIR [BUDGET_SECONDS]}
budget=${2:-540}
start=$(date +%s)
until_share() { local left=$(( budget * $1 / 100 - ($(date +%s) - start) )); echo $(( left > 1 ? left : 1 )); }
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -n "${TVM_BUNDLE:-}" ]; then
    mkdir -p /tmp/tvm_site
    tar -xJf "$TVM_BUNDLE/tvm_py.tar.xz" -C /tmp/tvm_site && tar -xJf "$TVM_BUNDLE/tvm_ffi.tar.xz" -C /tmp/tvm_site \
        && xz -dc "$TVM_BUNDLE/libtvm_compiler.so.xz" > /tmp/tvm_site/tvm/lib/libtvm_compiler.so || exit 1
    export PYTHONPATH="/tmp/tvm_site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import tvm; d = tvm.cuda(); print('tvm', tvm.__version__, d.exist, d.device_name, d.compute_version)" \
    | tee -a "$out/gpu.txt" || exit 1
timeout "$(until_share 20)" python3 -m pytest -v -n "$(nproc)" -p no:cacheprovider tests/test_gpu_attention.py \
    tests/test_gpu_stitching.py tests/test_cuda_backend.py -k "on_the_gpu or command_line_compiles_for_cuda" \
    > "$out/tests.log" 2>&1
echo "tests rc $? at $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
timeout "$(until_share 55)" python3 scripts/check_zoo.py --targets '{"kind":"cuda","arch":"sm_90"}' --fusion all \
    --jobs "$(nproc)" --json "$out/check_zoo.json" > "$out/check_zoo.log" 2>&1
echo "check_zoo rc $? at $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
timeout "$(until_share 85)" python3 scripts/bench_gpu.py \
    --models "bert_base:seq=128;batch=1,resnet50:batch=1,vit:batch=1,mobilenet_v2:batch=1,densenet121:batch=1,multi_head,softmax_chain" \
    --fusion none,stock,apollo,dominator-both,neoflow,torch,torch-compile --rounds 3 --jobs 7 \
    --json "$out/bench_gpu.json" > "$out/bench.log" 2>&1
echo "bench_gpu rc $? at $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
timeout "$(until_share 93)" python3 scripts/bench_gpu.py --models "bert_base:seq=128;batch=1,resnet50:batch=1" \
    --fusion none,stock,neoflow,torch,torch-compile --rounds 3 --jobs 2 --cuda-graph \
    --json "$out/bench_gpu_cuda_graph.json" > "$out/bench_cuda_graph.log" 2>&1
echo "bench_gpu --cuda-graph rc $? at $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
timeout "$(until_share 100)" python3 scripts/kernel_times.py --model vit --fusion stock,apollo,neoflow \
    --target '{"kind":"cuda","arch":"sm_90"}' --runs 20 --rounds 2 --top 12 > "$out/kernel_times.log" 2>&1
echo "kernel_times rc $? at $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"

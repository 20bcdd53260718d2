#!/usr/bin/env bash
# Issue 16 on one H200: the fused-kernel tests, the per-layer kernel list of a batch-1 decode step
# before/after (torch.profiler), and the benchmarks (P2, P1, P4, prefill vs compute floor, greedy tokens
# fused on vs off), then the rest of tests/gpu. Results in $OUT: issue16.log, gpu_checks.jsonl,
# profiles.jsonl, results.json.
#   bash scripts/gpu_issue16.sh [CHECKOUT_BEFORE]   (a checkout of the code before the fusions, profiled as "before")
set -uo pipefail
BEFORE=${1:+$(cd "$1" && pwd)}
source "$(dirname "$0")/gpu_env.sh"
[ -f COMMIT16 ] && export MINISGL_COMMIT=$(cat COMMIT16)
export MINISGL_GPU_REPORT=$OUT/gpu_checks.jsonl
LOG=$OUT/issue16.log
P=$OUT/profiles.jsonl
run python3 -c "import torch, flashinfer; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'flashinfer', flashinfer.__version__, 'commit', '${MINISGL_COMMIT:-?}')"
run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_fused.py tests/gpu/test_flashinfer.py tests/gpu/test_graphs.py
if grep -q "FAILED tests/gpu/test_fused.py::test_one_launch_qk_kernel\|FAILED tests/gpu/test_fused.py::test_model" "$LOG"; then
    echo "our qk kernel failed its test: the profile below runs FlashInfer's kernels (qk_kernel=False)" | tee -a "$LOG"
    QK=--no-qk-kernel
fi
if [ -n "$BEFORE" ]; then
    run env PYTHONPATH=$BEFORE:$PYTHONPATH python3 benchmarks/profile_decode.py before --json $P
    run python3 benchmarks/profile_decode.py fused_flashinfer_only --no-qk-kernel --json $P
fi
run python3 benchmarks/profile_decode.py fused --bs 1,8,64,256 --json $P ${QK:-}
run python3 benchmarks/bench_gpu.py p2 p1 p4 pf tokens
cp benchmarks/results.json "$OUT"/
run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_llm_cuda.py
echo "gpu_issue16: exit status $status" | tee -a "$LOG"
exit $status

#!/usr/bin/env bash
# Issue 18's ITL tail on one H200 (~4 min): the prefill-graph and mixed-step GPU tests, one prefill step's cost
# with graphs and mixing on vs off (benchmarks/prefill_step.py), and P1/P2 with the new defaults . In $OUT: gpu_mixed.log, gpu_checks.jsonl, results.json.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
export MINISGL_GPU_REPORT=$OUT/gpu_checks.jsonl
LOG=$OUT/gpu_mixed.log
SMOL=benchmarks/configs/smollm2-135m
run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_graphs.py tests/gpu/test_llm_cuda.py
for kw in "" "cuda_graph_max_extend=0" "cuda_graph_max_extend=0,mixed_chunk=0"; do
    run python3 benchmarks/prefill_step.py --model $SMOL --lens 16,561,1024,4096 --reps 3 --decode-bs 64 --llm-kwargs "$kw"
done
run python3 benchmarks/prefill_step.py --model benchmarks/configs/qwen3-0.6b --lens 16,561,1024 --reps 3 --decode-bs 64
if [ "${GPU_MIXED_BENCH:-1}" = 1 ]; then
    run python3 benchmarks/bench_gpu.py p1 p2
fi
cp benchmarks/results.json "$OUT/results.json"
echo "gpu_mixed: exit status $status" | tee -a "$LOG"
exit $status

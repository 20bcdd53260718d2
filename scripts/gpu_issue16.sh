#!/usr/bin/env bash
# Issue 16 on one H200 (~5 min): the fused-kernel and lean-step tests, the per-layer kernel list of a decode step
# (torch.profiler; lean step on/off, cuBLAS vs cuBLASLt, our one-row GEMV off), the host's share of a
# decode step (lean off/on), and the benchmarks (P2, P1, P4, lean off/on side by side, the GEMM, GEMV sweep,
# cuBLASLt and GEMV-off experiments). Needs .gpu/kernels/*.cubin (ONLY_CUBIN=1 bash scripts/build_fi_extra_kernels.sh). In $OUT:
# issue16.log, gpu_checks.jsonl, profiles.jsonl, host_step.jsonl, results.json.
#   bash scripts/gpu_issue16.sh [CHECKOUT_BEFORE]   (a checkout of older code, profiled as "before")
set -uo pipefail
BEFORE=${1:+$(cd "$1" && pwd)}
source "$(dirname "$0")/gpu_env.sh"
[ -f COMMIT16 ] && export MINISGL_COMMIT=$(cat COMMIT16)
export MINISGL_GPU_REPORT=$OUT/gpu_checks.jsonl
LOG=$OUT/issue16.log
P=$OUT/profiles.jsonl
QWEN=benchmarks/configs/qwen3-0.6b
run python3 -c "import torch, flashinfer; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'flashinfer', flashinfer.__version__, 'commit', '${MINISGL_COMMIT:-?}')"
run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_fused.py tests/gpu/test_flashinfer.py tests/gpu/test_graphs.py tests/gpu/test_lean_step.py
if grep -q "FAILED tests/gpu/test_fused.py::test_one_launch_qk_kernel\|FAILED tests/gpu/test_fused.py::test_model" "$LOG"; then
    echo "our qk kernel failed its test: the profiles below run FlashInfer's kernels (qk_kernel=False)" | tee -a "$LOG"
    QK=--no-qk-kernel
fi
[ -n "$BEFORE" ] && run env PYTHONPATH=$BEFORE:$PYTHONPATH python3 benchmarks/profile_decode.py before --json $P
run python3 benchmarks/profile_decode.py lean_off --lean-off --bs 1,256 --json $P ${QK:-}
run python3 benchmarks/profile_decode.py lean_on --bs 1,8,256 --json $P ${QK:-}
run python3 benchmarks/profile_decode.py lean_on_cublaslt --blas cublaslt --bs 1,256 --json $P ${QK:-}
run python3 benchmarks/profile_decode.py lean_on_no_gemv --no-gemv-kernel --bs 1 --json $P ${QK:-}
run python3 benchmarks/host_step.py --device cuda --model $QWEN --bs 1,256 --lean 0,1,0,1 --json $OUT/host_step.jsonl
run python3 benchmarks/bench_gpu.py p2 p1 p4 lean gemm gemv lt nogemv gemvrow
cp benchmarks/results.json "$OUT"/
# torch's host thread pool (16 threads here) against 4: P1 and the host's share of a step, side by side
run env OMP_NUM_THREADS=4 python3 benchmarks/host_step.py --device cuda --model $QWEN --bs 1,256 --lean 1 --json $OUT/host_step_omp4.jsonl
run env OMP_NUM_THREADS=4 python3 benchmarks/bench_gpu.py p1
cp benchmarks/results.json "$OUT"/results_omp4.json
run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_llm_cuda.py
echo "gpu_issue16: exit status $status" | tee -a "$LOG"
exit $status

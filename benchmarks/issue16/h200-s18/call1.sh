#!/usr/bin/env bash
# Session 18, call 1: `pytest tests/gpu` at main; P1 with its breakdown and P2 at the defaults; the prepared LEANBAL
# experiment (LEAN_PLAN on, then also the balanced kernel's KV threshold at 0, P1 each); the kernels of one decoder
# layer at batch 128 and 256 (P1's decode steps sit at batch ~130: where does their 1.48 x the floor go?).
# attn_pages.py: FlashInfer decode over pages of 1 vs 16 tokens, in order or shuffled, both kernels.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 150 python3 benchmarks/attn_pages.py --json $OUT/attn_pages.json
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 240 python3 benchmarks/bench_gpu.py p1 p1b p2 leanbal
run timeout 120 python3 benchmarks/profile_decode.py default --bs 128,256 --json $OUT/profile_bs128_256.jsonl
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call1: exit status $status" | tee -a "$LOG"

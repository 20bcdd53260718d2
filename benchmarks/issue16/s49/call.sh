#!/usr/bin/env bash
# Session 49's H200 call (s48/call_next.sh reordered: what the targets table lacks before the layout pair). Why does
# the H200's decode graph read its K/V slower than FlashInfer's kernel alone (attn_pages --engine-like; the H100, the
# control, showed no gap: ../s48/call1/), with the clocks, power and throttle reasons logged all call long; then the
# targets at the default (P1, P2 with the head inside the graphs), P4 and the fused-vs-plain tokens, the KV pool
# layer-major beside the default, the fastest engine measured (tcwhole16) now with the head inside its graphs, the
# graph tests, the replays' kernel timelines at 64 and 256. Prepare .gpu as s40/call.sh says (pipe_gemm and the
# CUTLASS objects stay behind: 64 MiB).
#   S49_SECS=540 bash benchmarks/issue16/s49/call.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S49_SECS:-540}
why=clocks_event_reasons.active; nvidia-smi --query-gpu=$why --format=csv >/dev/null 2>&1 || why=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$why --format=csv -lms 100 >$OUT/smi.csv 2>&1 &
smi=$!
keep() { cp benchmarks/results.json $OUT/results.json; }
run_for 60 python3 benchmarks/attn_pages.py --engine-like --bs 256 --ctx 1025 --json $OUT/attn_engine_like.json
run_for 100 python3 benchmarks/bench_gpu.py p1 p2; keep
run_for 120 python3 benchmarks/bench_gpu.py p4 tokens; keep
run_for 150 python3 benchmarks/bench_gpu.py layermajor; keep
export TCWHOLE_ENGINES=tcwhole16; run_for 70 python3 benchmarks/bench_gpu.py tcwhole; keep; unset TCWHOLE_ENGINES
run_for 80 python3 -m pytest -q tests/gpu/test_graphs.py -p no:cacheprovider -rfs
# each kernel's start and end in the 64- and 256-request replays: busy, gaps and PDL overlap a layer
# (python3 benchmarks/timeline_gaps.py $OUT/timeline.jsonl, here)
run_for 50 python3 benchmarks/profile_decode.py tl --bs 64,256 --timeline $OUT/timeline.jsonl
run_for 30 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
kill $smi
echo "call done ($SECONDS s)" >>$LOG

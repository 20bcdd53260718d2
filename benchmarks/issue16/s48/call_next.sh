#!/usr/bin/env bash
# What the next H200 call owes (session 48 got only an H100; ~560 s): why the H200's decode graph reads its K/V
# slower than FlashInfer's kernel alone (attn_pages --engine-like, with the clock log beside it; the H100 is the
# control, no gap, benchmarks/issue16/s48/call1/) and the engine with its pool laid out layer-major beside the
# default (bench_gpu.py layermajor), the targets at the default (P1, P2 with the head inside the graphs), the graph
# tests, P4 and the fused-vs-plain tokens, the kernel alone at 256. Prepare .gpu as s40/call.sh says (pipe_gemm and
# the CUTLASS objects stay behind: 64 MiB).
#   S48_SECS=560 bash benchmarks/issue16/s48/call_next.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S48_SECS:-560}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 50 >$OUT/smi_engine_like.csv 2>&1 &
smi=$!
run_for 60 python3 benchmarks/attn_pages.py --engine-like --bs 256 --ctx 1025 --json $OUT/attn_engine_like.json
kill $smi
run_for 150 python3 benchmarks/bench_gpu.py layermajor
cp benchmarks/results.json $OUT/results.json
# the clocks and power while the engine runs (is the H200 held back by its power cap at 256 rows, where the products
# compute and the attention streams?)
why=clocks_event_reasons.active; nvidia-smi --query-gpu=$why --format=csv >/dev/null 2>&1 || why=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$why --format=csv -lms 50 >$OUT/smi_p1p2.csv 2>&1 &
smi=$!
run_for 100 python3 benchmarks/bench_gpu.py p1 p2
kill $smi
cp benchmarks/results.json $OUT/results.json
run_for 80 python3 -m pytest -q tests/gpu/test_graphs.py -p no:cacheprovider -rfs
run_for 120 python3 benchmarks/bench_gpu.py p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 30 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
echo "call done ($SECONDS s)" >>$LOG

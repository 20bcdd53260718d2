#!/usr/bin/env bash
# Session 47, for an H200 (~330 s): the head pair as on the H100 (call 1), the default's P2 (the targets' figures with
# the head inside the graphs), FlashInfer's decode kernel alone at 256 requests beside the graph's own per-layer time,
# then P4 and the fused-vs-plain tokens (owed since session 46). Prepare .gpu as s40/call.sh says.
#   S47_SECS=330 bash benchmarks/issue16/s47/call3.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S47_SECS:-330}
run_for 130 python3 benchmarks/bench_gpu.py headpair
cp benchmarks/results.json $OUT/results.json
run_for 20 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 180 python3 benchmarks/bench_gpu.py p2 p4 tokens
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG

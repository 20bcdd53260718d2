#!/usr/bin/env bash
# Session 47, for an H200 (~260 s): the default's P1 and P2 (the targets' figures with the head inside the graphs),
# FlashInfer's decode kernel alone at 256 requests beside the graph's own per-layer time (P2's trace has none: the
# head pair's rows do), P4 and the fused-vs-plain tokens (owed since session 46), then the head pair if time is left.
# Prepare .gpu as s40/call.sh says (pipe_gemm and the CUTLASS objects can stay behind: 64 MiB).
#   S47_SECS=260 bash benchmarks/issue16/s47/call3.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S47_SECS:-260}
run_for 20 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 210 python3 benchmarks/bench_gpu.py p1 p2 p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 130 python3 benchmarks/bench_gpu.py headpair
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG

#!/usr/bin/env bash
# Session 47, for an H200 (~300 s; what the next call owes): call3.sh's figures in order of need. The default's P1 and
# P2 (the targets with the head inside the graphs), the decode kernel alone at 256 requests, then P4 and the
# fused-vs-plain tokens, and cuBLASLt's other kernels for the LM head (lt_probe.py --head), as time allows.
# Prepare .gpu as s40/call.sh says (pipe_gemm and the CUTLASS objects can stay behind: 64 MiB).
#   S47_SECS=300 bash benchmarks/issue16/s47/call4.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S47_SECS:-300}
run_for 100 python3 benchmarks/bench_gpu.py p1 p2
cp benchmarks/results.json $OUT/results.json
run_for 20 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 120 python3 benchmarks/bench_gpu.py p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 60 python3 benchmarks/lt_probe.py --head --m 1,8,64,128,256 --json $OUT/lt_head.json
echo "call done ($SECONDS s)" >>$LOG

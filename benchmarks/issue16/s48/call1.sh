#!/usr/bin/env bash
# Session 48, first call (~570 s): what session 47 owes. The graph tests and the engine-level GPU tests over the
# review's _forward (5983cb1: paging.next_token_slots), then s47/call4.sh's figures: P1 and P2 at the default (the head
# inside the graphs), FlashInfer's decode kernel alone at 256 requests (does the H200's graph read its K/V slower than
# the kernel alone? and does the engine's one large pool or the graph make it so: attn_pages --engine-like), cuBLASLt's other kernels for the LM head, P4 and the fused-vs-plain tokens, then the rest of
# tests/gpu. Prepare .gpu as s40/call.sh says (pipe_gemm and the CUTLASS objects stay behind: 64 MiB).
#   S48_SECS=570 bash benchmarks/issue16/s48/call1.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S48_SECS:-570}
run_for 130 python3 -m pytest -q tests/gpu/test_graphs.py tests/gpu/test_llm_cuda.py tests/gpu/test_lean_step.py -p no:cacheprovider -rfs
run_for 100 python3 benchmarks/bench_gpu.py p1 p2
cp benchmarks/results.json $OUT/results.json
run_for 30 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 60 python3 benchmarks/attn_pages.py --engine-like --bs 256 --ctx 1025 --json $OUT/attn_engine_like.json
run_for 60 python3 benchmarks/lt_probe.py --head --m 1,8,64,128,256 --json $OUT/lt_head.json
run_for 120 python3 benchmarks/bench_gpu.py p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 90 python3 -m pytest -q tests/gpu/test_fused.py tests/gpu/test_trace_gpu.py tests/gpu/test_moe_gpu.py tests/gpu/test_sampling_gpu.py tests/gpu/test_flashinfer.py -p no:cacheprovider -rfs
echo "call done ($SECONDS s)" >>$LOG

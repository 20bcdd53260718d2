#!/usr/bin/env bash
# Session 48, first call (~420 s; device time is short after failed starts): what session 47 owes, in order of need.
# The graph tests and the engine-level GPU tests over the review's _forward (5983cb1: paging.next_token_slots); why
# the H200's graph reads its K/V slower than the kernel alone (attn_pages --engine-like: 28 tensors, the engine's
# one large pool, that pool in a graph, between a layer's products, a layer-major pool); P1 and P2 at the default
# (the head inside the graphs); the decode kernel alone at 256 requests; cuBLASLt's other kernels for the LM head;
# then the rest of tests/gpu, P4 and the fused-vs-plain tokens as time allows. Prepare .gpu as s40/call.sh says
# (pipe_gemm and the CUTLASS objects stay behind: 64 MiB).
#   S48_SECS=420 bash benchmarks/issue16/s48/call1.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S48_SECS:-420}
# the SM and memory clocks and the power every 50 ms while it runs (does the company of the products slow the clocks?)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 50 >$OUT/smi_engine_like.csv 2>&1 &
smi=$!
run_for 60 python3 benchmarks/attn_pages.py --engine-like --bs 256 --ctx 1025 --json $OUT/attn_engine_like.json
kill $smi
run_for 130 python3 -m pytest -q tests/gpu/test_graphs.py tests/gpu/test_llm_cuda.py tests/gpu/test_lean_step.py -p no:cacheprovider -rfs
run_for 100 python3 benchmarks/bench_gpu.py p1 p2
cp benchmarks/results.json $OUT/results.json
run_for 30 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 60 python3 benchmarks/lt_probe.py --head --m 1,8,64,128,256 --json $OUT/lt_head.json
run_for 90 python3 -m pytest -q tests/gpu/test_fused.py tests/gpu/test_trace_gpu.py tests/gpu/test_moe_gpu.py tests/gpu/test_sampling_gpu.py tests/gpu/test_flashinfer.py -p no:cacheprovider -rfs
run_for 120 python3 benchmarks/bench_gpu.py p4 tokens
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG

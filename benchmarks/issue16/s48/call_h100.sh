#!/usr/bin/env bash
# Session 48, on an H100 while no H200 starts (~300 s): all of tests/gpu over the review's _forward (5983cb1), the
# engine-like attention question (on the H100 the graph's kernel matched the kernel alone in session 47: the control),
# and cuBLASLt's other kernels for the LM head (its 256-row product is bound by compute, the same on either card).
#   S48_SECS=300 bash benchmarks/issue16/s48/call_h100.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S48_SECS:-300}
run_for 130 python3 -m pytest -q tests/gpu/test_graphs.py tests/gpu/test_llm_cuda.py tests/gpu/test_lean_step.py -p no:cacheprovider -rfs
# the SM and memory clocks and the power every 50 ms while it runs (does the company of the products slow the clocks?)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 50 >$OUT/smi_engine_like.csv 2>&1 &
smi=$!
run_for 60 python3 benchmarks/attn_pages.py --engine-like --bs 256 --ctx 1025 --json $OUT/attn_engine_like.json
kill $smi
run_for 60 python3 benchmarks/lt_probe.py --head --m 1,8,64,128,256 --json $OUT/lt_head.json
run_for 90 python3 -m pytest -q tests/gpu/test_fused.py tests/gpu/test_trace_gpu.py tests/gpu/test_moe_gpu.py tests/gpu/test_sampling_gpu.py tests/gpu/test_flashinfer.py -p no:cacheprovider -rfs
echo "call done ($SECONDS s)" >>$LOG

#!/usr/bin/env bash
# Session 47, first call (~580 s): the LM head and the greedy argmax inside the decode graphs (cfg.graph_head).
# The graph tests (the new head test and its mutant among them), the head pair (off / on / off / on: P2 at 1, 8, 64,
# 256 with the host's own work, then P1), FlashInfer's decode kernel alone at 256 requests (is the graph's own
# 275 us a layer the kernel's?), then the engine-level GPU tests over the new _forward. Prepare .gpu as
# s40/call.sh says.
#   S47_SECS=580 bash benchmarks/issue16/s47/call1.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S47_SECS:-580}
run_for 140 python3 -m pytest -q tests/gpu/test_graphs.py -p no:cacheprovider -rfs
run_for 300 python3 benchmarks/bench_gpu.py headpair
cp benchmarks/results.json $OUT/results.json
run_for 60 python3 benchmarks/attn_pages.py --bs 256 --ctx 1025 --json $OUT/attn_pages_256.json
run_for 150 python3 -m pytest -q tests/gpu/test_llm_cuda.py tests/gpu/test_lean_step.py -p no:cacheprovider -rfs -x
echo "call done ($SECONDS s)" >>$LOG

#!/usr/bin/env bash
# Session 27's call for the H200 (not run in session 27: no device time left). 1. What the GPU emits for the first
# rate run's load (sweep seed 1000): on this session's CPU request 28 repeats special token 10 for 812 tokens, and a
# replay of that through the old let_go stalls seconds where the H200 stalled tens of ms. 2. gpu_serve.sh, SmolLM2 at
# the target rate twice, at today's detokenizer (4 let_go cuts, special tokens out of the windows): does the first
# run's stall (TTFT p99 172-225 ms in session 26) go? The hop log, the stall logs, vmstat, and py-spy on every server
# process from the end of the all-at-once run through both rate runs.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run uptime
run timeout 120 python3 benchmarks/issue18/h200-s27/r28_gpu.py --seed 1000
S=$OUT/s; mkdir -p $S
vmstat -t 1 > $S/vmstat.log 2>&1 & VM=$!
python3 benchmarks/issue18/h200-s27/spy_watch.py $S/serve.log $LOG $S --seconds 16 > $S/spy_watch.log 2>&1 & SPY=$!
run timeout 170 python3 -m minisgl_edu.bench compare --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --num-prompts 256 --warmup 8 --repeats 1 --client-procs 4 "--serve-args=--hop-log $S/hops.jsonl" \
    --sweep-rates 0.5x,0.5x --sweep-num-prompts 128 --no-progress --server-log $S/serve.log --out $S/serve.json
wait $SPY; kill $VM
cat $S/spy_watch.log | tee -a $LOG
grep -h "waited .* ms in hop\|one wake took\|gc generation" $S/serve.log | head -40 | tee -a $LOG
python3 - <<'PY' 2>&1 | tee -a $LOG
import json, os
r = json.load(open(os.environ["OUT"] + "/s/serve.json"))
for s in r.get("sweep", []):
    print(f"rate {s['request_rate']:.2f}: TTFT p50/p99 {s['ttft_ms']['median']:.1f}/{s['ttft_ms']['p99']:.1f} ms, ITL p99 "
          f"{s['itl_ms']['p99']:.2f}, step median {s.get('step_median_ms', {}).get('decode', float('nan')):.2f}, hops "
          + ", ".join(f"{h} {q['median']:.3f}/{q['p99']:.3f}" for h, q in s.get("hop_ms", {}).items()))
PY
ls -la $S | tee -a $LOG
gzip $S/hops.jsonl $S/spy_*.json

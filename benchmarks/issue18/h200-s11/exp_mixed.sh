#!/usr/bin/env bash
# Session 11, issue 18 experiment: the mixed-step budget (with the backlog rule) against the default, one machine, side by side.
#   bash benchmarks/issue18/h200-s11/exp_mixed.sh MODEL RATE
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
model=$1; rate=$2
LOG=$OUT/exp_$model.log
extra=""; [ "$model" = qwen3-0.6b ] && extra="--skip-tokenizer-init"
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
i=0
for cfg in "" "--mixed-prefill-tokens=509 --mixed-backlog-tokens=4096" "--mixed-prefill-tokens=${THIRD:-253} --mixed-backlog-tokens=4096"; do
    run timeout 200 python3 -m minisgl_edu.bench compare --model-path "benchmarks/configs/$model" --device cuda --dummy-weights \
        --num-prompts 256 --warmup 8 --repeats 1 "--serve-args=$extra $cfg" --sweep-rates "$rate,$rate" --sweep-num-prompts 128 \
        --no-progress --server-log "$OUT/exp_${model}_$i.serve.log" --out "$OUT/exp_${model}_$i.json"
    i=$((i+1))
done
python3 - "$model" <<'PY'
import json, os, sys
m = sys.argv[1]; out = os.environ["OUT"]
for i, name in enumerate(["default", "mixed 509 / backlog 4096", "mixed third / backlog 4096"]):
    p = f"{out}/exp_{m}_{i}.json"
    if not os.path.exists(p): print(name, "missing"); continue
    r = json.load(open(p)); run = r["runs"][0]
    print(f"{m} {name}: offline {run['offline']['output_throughput']:.0f} serve {run['serve']['output_throughput']:.0f} ratio {run['ratio']['serve']:.3f}")
    for s in r.get("sweep", []):
        med = s.get("step_median_ms", {}).get("decode", float("nan"))
        print(f"   {s['request_rate']:.1f} req/s TTFT p99 {s['ttft_ms']['p99']:.1f} ITL p50/p99 {s['itl_ms']['median']:.2f}/{s['itl_ms']['p99']:.2f} "
              f"median decode {med:.2f} ratio {s['itl_ms']['p99']/med:.2f} mixed {s['step_ms'].get('mixed', float('nan')):.2f} failed {s['failed']}")
PY
tar -czf "$OUT/exp_$model.tgz" -C "$OUT" $(cd "$OUT" && ls exp_${model}_* 2>/dev/null)
rm -f $OUT/exp_${model}_*.serve.log

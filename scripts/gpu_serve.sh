#!/usr/bin/env bash
# The serving load curve (issue 18), on one CUDA machine, < 6 minutes on one H200. Results go to $OUT
# (default ./out): gpu_serve.log, serve_<model>.json (bench compare: offline LLM.generate and `serve` on the
# same 256-request anchors workload, then a request-rate sweep), serve_<model>.log (the server's log),
# gpu_serve.json (both models, what notebook 09's plot_load_curve reads).
#   bash scripts/gpu_serve.sh                     # SmolLM2-135M and Qwen3-0.6B architectures, dummy weights
#   GPU_SERVE_TINY=1 DEVICE=cpu bash scripts/gpu_serve.sh   # a dry run with tiny sizes (checks the script)
#   GPU_SERVE_MODELS=smollm2-135m GPU_SERVE_RATES=0.5x,0.5x,0.5x bash scripts/gpu_serve.sh   # one model, the target rate thrice
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
LOG=$OUT/gpu_serve.log
DEVICE=${DEVICE:-cuda}
N=${GPU_SERVE_PROMPTS:-256}; SWEEP_N=${GPU_SERVE_SWEEP_PROMPTS:-128}; RATES=${GPU_SERVE_RATES:-0.5x,1x,0.75x,0.25x}  # the target rate first: a cut-short run keeps it
CLIENTS=${GPU_SERVE_CLIENT_PROCS:-4}  # client processes: one event loop stamps a burst of 40 streams one by one (chapter 9)
LENS=(); SERVE_EXTRA=""; LIMIT=${GPU_SERVE_LIMIT:-150}  # seconds per model: two models + start-up < 6 min; --out is written after every run, so a cut keeps the finished ones
if [ "${GPU_SERVE_TINY:-0}" = 1 ]; then
    N=4; SWEEP_N=4; RATES=0.5x,1x; LENS=(--input-len 8 16 --output-len 2 4); LIMIT=600
    SERVE_EXTRA="--max-total-tokens 8192 --context-length 512 --max-running-reqs 16"
fi
[ "$DEVICE" = cuda ] && run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run python3 -c "import torch, httpx; print('torch', torch.__version__, 'commit', '${MINISGL_COMMIT:-?}')"
python3 -c "import prometheus_client" 2>/dev/null || echo "WARNING: no prometheus_client: /metrics answers 503, step_ms stays empty (bundle.sh prometheus_client)" | tee -a "$LOG"

for model in ${GPU_SERVE_MODELS:-smollm2-135m qwen3-0.6b}; do
    extra=$SERVE_EXTRA
    [ "$model" = qwen3-0.6b ] && extra="$extra --skip-tokenizer-init"  # its folder has no tokenizer
    run timeout "$LIMIT" python3 -m minisgl_edu.bench compare --model-path "benchmarks/configs/$model" \
        --device "$DEVICE" --dummy-weights --num-prompts "$N" "${LENS[@]}" --warmup 8 --repeats 1 --client-procs "$CLIENTS" \
        "--serve-args=$extra" --sweep-rates "$RATES" --sweep-num-prompts "$SWEEP_N" --no-progress \
        --server-log "$OUT/serve_$model.log" --out "$OUT/serve_$model.json"
done
# what the servers logged about stalls (MINISGL_STALL_LOG_MS, MINISGL_GC_LOG_MS: 20 ms by default), at most 20 lines
grep -h "waited .* ms in hop\|one wake took\|gc generation" "$OUT"/serve_*.log 2>/dev/null | head -20 | tee -a "$LOG"
run python3 - <<'PY'
import json, os, datetime
out = os.environ.get("OUT", "out")
allres = {"commit": os.environ.get("MINISGL_COMMIT", "?"), "date": datetime.datetime.utcnow().isoformat(timespec="seconds"),
          "models": {}}
for m in ("smollm2-135m", "qwen3-0.6b"):
    p = os.path.join(out, f"serve_{m}.json")
    if os.path.exists(p):
        allres["models"][m] = json.load(open(p))
json.dump(allres, open(os.path.join(out, "gpu_serve.json"), "w"), indent=1)
for m, r in allres["models"].items():
    if not r.get("runs"):
        print(f"{m}: no finished run (see serve_{m}.log)")
        continue
    run = r["runs"][0]
    print(f"{m}: offline {run['offline']['output_throughput']:.0f} tok/s, serve {run['serve']['output_throughput']:.0f} "
          f"tok/s, ratio {run['ratio']['serve']:.3f}, failed {run['serve']['failed']}" + (" (partial)" if r.get("partial") else ""))
    for s in r.get("sweep", []):
        print(f"  {s['request_rate']:7.2f} req/s: {s['output_throughput']:8.0f} tok/s  TTFT p50/p99 {s['ttft_ms']['median']:7.1f}/"
              f"{s['ttft_ms']['p99']:7.1f} ms  ITL p50/p99 {s['itl_ms']['median']:6.2f}/{s['itl_ms']['p99']:6.2f} ms ({s.get('arrival_clock', 'read')}; by read time p99 {s.get('itl_read_ms', s['itl_ms'])['p99']:.2f}; shared reads {s.get('shared_read_pct', float('nan')):.2f} %)  "
              f"decode step mean/median {s['step_ms'].get('decode', float('nan')):.2f}/"
              f"{s.get('step_median_ms', {}).get('decode', float('nan')):.2f} ms  step p99 {s.get('step_p99_ms', float('nan')):.2f} ms  ITL p99 emitted / at the API {s.get('emit_p99_ms', float('nan')):.2f} / {s.get('api_itl_p99_ms', float('nan')):.2f} ms  "
              f"failed {s['failed']}")
        for h, q in s.get("hop_ms", {}).items():
            print(f"            a step's replies, hop {h}: median / p99 {q['median']:.3f} / {q['p99']:.3f} ms")
PY
tar -czf "$OUT/gpu_serve.tgz" -C "$OUT" $(cd "$OUT" && ls serve_*.json serve_*.log gpu_serve.json gpu_serve.log 2>/dev/null)  # one file back
echo "gpu_serve: exit status $status" | tee -a "$LOG"
exit $status

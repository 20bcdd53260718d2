#!/usr/bin/env bash
# Where does serving lose to the offline engine? (issue 18) One model on one CUDA machine, < 4 minutes on one H200.
# Offline LLM.generate, then the same 256-request anchors workload through `serve` all at once, with each server
# process's and the client's CPU seconds per output token (bench serve's CPU report: with a core each, serve
# throughput <= 1 / the largest), the same load through the httpx client (the old client: its own ceiling), a
# Poisson run at a low rate (ITL p99: long garbage collections are logged, MINISGL_GC_LOG_MS), and, when py-spy is
# there, a sampled profile of every server process and of the client. Results: $OUT/profile_serve.log (everything
# printed, the summary at the end) and one archive $OUT/profile_serve.tgz (the device tool returns few files) of:
#   offline.json serve.json serve_httpx.json serve_rate.json    the bench outputs (CPU report under "cpu")
#   server.log             the server's log (gc warnings)
#   pyspy_*.txt pyspy_top.txt   raw py-spy samples and the top frames per process
#   bash scripts/gpu_profile_serve.sh                   # SmolLM2-135M architecture, dummy weights
#   MODEL=qwen3-0.6b bash scripts/gpu_profile_serve.sh  # the other one (--skip-tokenizer-init)
#   GPU_PROFILE_TINY=1 DEVICE=cpu bash scripts/gpu_profile_serve.sh   # a dry run with tiny sizes (checks the script)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
LOG=$OUT/profile_serve.log
D=$OUT/profile_serve; rm -rf "$D"; mkdir -p "$D"; export PROFILE_DIR=$D
DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-smollm2-135m}
N=${GPU_PROFILE_PROMPTS:-256}; LENS=(); SERVE_EXTRA=""; RATE_N=96; RATE=${GPU_PROFILE_RATE:-10}; SPY_S=12
export MINISGL_GC_LOG_MS=${MINISGL_GC_LOG_MS:-20}
if [ "${GPU_PROFILE_TINY:-0}" = 1 ]; then
    N=8; RATE_N=4; LENS=(--input-len 8 16 --output-len 4 8); SPY_S=3
    SERVE_EXTRA="--max-total-tokens 8192 --context-length 512 --max-running-reqs 16"
fi
[ "$MODEL" = qwen3-0.6b ] && SERVE_EXTRA="$SERVE_EXTRA --skip-tokenizer-init"  # its folder has no tokenizer
CFG=benchmarks/configs/$MODEL
[ "$DEVICE" = cuda ] && run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run python3 -c "import torch; print('torch', torch.__version__, 'commit', '${MINISGL_COMMIT:-?}', 'cores', __import__('os').cpu_count())"
run python3 -c "import uvicorn, importlib.util as u; print('uvicorn', uvicorn.__version__, 'httptools', bool(u.find_spec('httptools')), 'uvloop', bool(u.find_spec('uvloop')))"
WORK=(--num-prompts "$N" "${LENS[@]}" --warmup 8 --no-progress)

# 1. offline, in its own process (the server would take its GPU memory)
run timeout 100 python3 -m minisgl_edu.bench offline --model-path "$CFG" --device "$DEVICE" --dummy-weights "${WORK[@]}" \
    --out "$D/offline.json"

# 2. the server
PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL=http://127.0.0.1:$PORT
python3 -m minisgl_edu.serve --model "$CFG" --device "$DEVICE" --dummy-weights --port "$PORT" $SERVE_EXTRA \
    > "$D/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 150); do curl -sf "$URL/health" > /dev/null && break; sleep 1; done
run curl -s "$URL/health"

# 3. the measurement (raw client), the old client, then a low rate; py-spy last (it slows what it samples)
run timeout 60 python3 -m minisgl_edu.bench serve --base-url "$URL" "${WORK[@]}" --seed 1 --out "$D/serve.json"
run timeout 60 python3 -m minisgl_edu.bench serve --base-url "$URL" "${WORK[@]}" --seed 2 --http-client httpx \
    --out "$D/serve_httpx.json"
run timeout 60 python3 -m minisgl_edu.bench serve --base-url "$URL" --num-prompts "$RATE_N" "${LENS[@]}" --warmup 0 \
    --no-progress --seed 3 --request-rate "$RATE" --out "$D/serve_rate.json"
SPY=$(command -v py-spy || ls /tmp/site/bin/py-spy 2>/dev/null)
if [ -n "$SPY" ]; then
    PIDS=$(curl -s "$URL/health" | python3 -c "import json,sys; h=json.load(sys.stdin); print(' '.join(f'{k}:{v}' for k,v in (h['workers']|{'api':h['pid']}).items()))")
    for kv in $PIDS; do
        # --gil: only the thread holding the GIL (the watchdog threads' sleeps stay out)
        "$SPY" record --gil --nonblocking --format raw -r 200 -d "$SPY_S" --pid "${kv#*:}" \
            -o "$D/pyspy_${kv%%:*}.txt" > /dev/null 2>&1 &
    done
    "$SPY" record --nonblocking --format raw -r 200 -d "$SPY_S" -o "$D/pyspy_client.txt" -- \
        python3 -m minisgl_edu.bench serve --base-url "$URL" "${WORK[@]}" --seed 4 > "$D/serve_pyspy.txt" 2>&1
    wait $(jobs -p | grep -v "^$SERVER$") 2>/dev/null
else
    echo "no py-spy: no profiles (bundle its wheel into .gpu/whl)" | tee -a "$LOG"
fi
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; trap - EXIT
grep -i "gc generation" "$D/server.log" | tail -20 | tee -a "$LOG"

# 4. the summary
run python3 - <<'PY'
import collections, glob, json, os
out = os.environ["PROFILE_DIR"]
load = lambda n: json.load(open(os.path.join(out, n))) if os.path.exists(os.path.join(out, n)) else None
off = load("offline.json")
for name in ("serve.json", "serve_httpx.json", "serve_rate.json"):
    s = load(name)
    if s is None:
        print(f"{name}: missing"); continue
    ratio = f" = {s['output_throughput'] / off['output_throughput']:.3f} of offline" if off else ""
    print(f"{name}: {s['output_throughput']:.0f} tok/s{ratio}, failed {s['failed']}, TTFT p50/p99 "
          f"{s['ttft_ms']['median']:.1f}/{s['ttft_ms']['p99']:.1f} ms, ITL p50/p99 {s['itl_ms']['median']:.2f}/"
          f"{s['itl_ms']['p99']:.2f} ms")
    for proc, v in sorted(s.get("cpu", {}).items(), key=lambda kv: -kv[1]["us_per_token"]):
        print(f"    {proc:16s} {v['us_per_token']:8.1f} us/token  {v['cpu_pct']:6.0f} % of a core")
if off:
    print(f"offline: {off['output_throughput']:.0f} tok/s")
with open(os.path.join(out, "pyspy_top.txt"), "w") as f:  # the 25 hottest frames (self time) of each process
    for path in sorted(glob.glob(os.path.join(out, "pyspy_*.txt"))):
        if path.endswith("pyspy_top.txt"):
            continue
        own, total = collections.Counter(), 0
        for line in open(path):
            stack, _, n = line.rstrip().rpartition(" ")
            if n.isdigit() and "importlib" not in stack:  # the client's start-up imports are not the load
                own[stack.split(";")[-1]] += int(n); total += int(n)
        f.write(f"== {os.path.basename(path)}: {total} samples\n")
        f.writelines(f"{100 * c / max(total, 1):5.1f}%  {k}\n" for k, c in own.most_common(25))
print(open(os.path.join(out, "pyspy_top.txt")).read())
PY
cp "$LOG" "$D/" && tar -czf "$OUT/profile_serve.tgz" -C "$OUT" profile_serve && rm -rf "$D"
echo "gpu_profile_serve: exit status $status" | tee -a "$LOG"
exit $status

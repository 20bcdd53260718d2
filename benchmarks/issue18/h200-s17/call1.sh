#!/usr/bin/env bash
# Session 17, call 1: `pytest tests/gpu` at the current defaults (early admission off, the gc threshold), then where a
# served scheduler's host time goes: py-spy (1000 Hz, GIL holder only) on the scheduler process of a SmolLM2 server
# at 42 req/s read by 4 client processes; raw collapsed stacks come back for benchmarks/spy_tree.py.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
S=benchmarks/configs/smollm2-135m
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q -x tests/gpu
PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL=http://127.0.0.1:$PORT
python3 -m minisgl_edu.serve --model $S --device cuda --dummy-weights --port $PORT --max-total-tokens 1000000 > $OUT/serve_spy.log 2>&1 &
SERVER=$!
for _ in $(seq 150); do curl -sf "$URL/health" > /dev/null && break; sleep 1; done
run curl -s "$URL/health"
run timeout 60 python3 -m minisgl_edu.bench serve --base-url "$URL" --num-prompts 64 --request-rate 42 --client-procs 4 --seed 4 --no-progress --out $OUT/warm.json
SPY=$(command -v py-spy || ls /tmp/site/bin/py-spy 2>/dev/null)
SCHED=$(curl -s "$URL/health" | python3 -c "import json,sys; w=json.load(sys.stdin)['workers']; print([v for k,v in w.items() if 'sched' in k][0])")
"$SPY" record --nonblocking --format raw -r 500 -d 14 --pid "$SCHED" -o $OUT/spy_sched.txt > $OUT/spy.err 2>&1 &
SPYPID=$!
run timeout 60 python3 -m minisgl_edu.bench serve --base-url "$URL" --num-prompts 256 --request-rate 42 --client-procs 4 --seed 5 --no-progress --out $OUT/spy_bench.json
wait $SPYPID
tail -3 $OUT/spy.err | tee -a $LOG
kill $SERVER; wait $SERVER 2>/dev/null
python3 benchmarks/spy_tree.py $OUT/spy_sched.txt 2>&1 | tee -a $LOG
echo "call1: exit status $status" | tee -a "$LOG"

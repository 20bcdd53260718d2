#!/usr/bin/env bash
# Session 25, call 2: the replies' wire, with the server instances separated from the wire. Plain sockets (A, the
# default) against ZMQ (B, --no-reply-socket), SmolLM2 at 40 req/s, 12 paired runs ABBAABBAABBA, fresh servers every
# 2 runs (--restart-every 2: six instances of each, each pair on its own pair of servers).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run timeout ${CALL_AB_LIMIT:-540} python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate 40 --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" "--b=--no-reply-socket" --order ABBAABBAABBA --paired --restart-every 2 --bench "--client-procs 4" \
    --log-dir "$OUT/ab" --out "$OUT/ab_wire_restart.json"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "call2: exit status $status" | tee -a "$LOG"

#!/usr/bin/env bash
# Session 24, call 1: the replies over plain UNIX sockets (default) against ZMQ (--no-reply-socket).
# 1. reply_wire.py: one hop through queues.pull/push, both wires, side by side, the receiver asleep between messages.
# 2. Two SmolLM2 servers, paired loads ABBAABBA at 40 req/s: A the default, B --no-reply-socket; /metrics' hop legs.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run timeout 90 python3 benchmarks/reply_wire.py --messages 2000 --repeats 2 --json $OUT/reply_wire.json
run timeout ${CALL_AB_LIMIT:-380} python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate ${CALL_RATE:-40} --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" "--b=--no-reply-socket" --order ${CALL_ORDER:-ABBAABBA} --paired --bench "--client-procs 4" \
    --log-dir "$OUT/ab" --out "$OUT/ab_wire.json"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "call1: exit status $status" | tee -a "$LOG"

#!/usr/bin/env bash
# Session 24, call 3: plain-socket replies (A, the default) against ZMQ (B, --no-reply-socket), two servers, paired:
# 1. all 256 requests at once (rate inf), ABBAABBA: does the new wire cost the all-at-once throughput?
# 2. SmolLM2 at gpu_serve's half-peak rate of this host class (45 req/s), ABBAABBA: ITL p99 / median decode step.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
for rate in inf ${CALL_RATE:-45}; do
    n=$([ $rate = inf ] && echo 256 || echo 128)
    run timeout ${CALL_AB_LIMIT:-220} python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
        --dummy-weights --rate $rate --num-prompts $n --common "--max-total-tokens 1000000" \
        --a "" "--b=--no-reply-socket" --order ABBAABBA --paired --bench "--client-procs 4" \
        --log-dir "$OUT/ab_$rate" --out "$OUT/ab_wire_$rate.json"
done
tar -czf $OUT/ab.tgz -C $OUT ab_inf ab_${CALL_RATE:-45} && rm -rf $OUT/ab_inf $OUT/ab_${CALL_RATE:-45}
echo "call3: exit status $status" | tee -a "$LOG"

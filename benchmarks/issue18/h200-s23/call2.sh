#!/usr/bin/env bash
# Session 23, call 2: (1) the ITL at every hop from the hop log (SmolLM2, target rate); (2) the API alone in front of
# an exact-cadence stand-in (api_cadence.py), direct writes against the task-per-event twin; (3) two SmolLM2 servers,
# paired loads: direct writes (A, the default) against --no-direct-write (B).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
RATE=${CALL_RATE:-40}
mkdir -p $OUT/hop
run timeout 120 python3 benchmarks/issue18/h200-s23/hop_serve.py benchmarks/configs/smollm2-135m $RATE $OUT/hop
gzip -f $OUT/hop/hops_*.jsonl
run timeout 150 python3 benchmarks/api_cadence.py --streams 48 --tokens 400 --repeats 2 --client-procs 4 \
    --serve-args '' ' --no-direct-write' --out $OUT/api_cadence.json
run timeout 100 python3 benchmarks/api_cadence.py --streams 48 --tokens 400 --repeats 1 --client-procs 4 --arrivals 30 \
    --serve-args '' ' --no-direct-write'
run timeout 280 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate "$RATE" --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" "--b=--no-direct-write" --order ${CALL_ORDER:-ABBAABBA} --paired --bench "--client-procs 4" \
    --log-dir "$OUT/ab" --out "$OUT/ab_direct.json"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "call2: exit status $status" | tee -a "$LOG"

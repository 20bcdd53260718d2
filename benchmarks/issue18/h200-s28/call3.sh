#!/usr/bin/env bash
# Session 28, call 3. Call 2 (gpu_serve.sh at 544fce8) read the reply hops' p99 at 2.1-4.6 ms at every rate for both
# models (session 26's call 6, 21c06e2, read 0.3-0.9 ms in its second rate run on another machine), so ITL p99 was
# 2.8-3.1x the median decode step. 1. Code or host? A (this tree) against B (21c06e2's minisgl_edu, a copy in
# before/), SmolLM2 at call 2's half-peak rate, paired ABBA, fresh servers every 2 runs. 2. On such a host, does a
# detokenizer that polls 2 ms before it sleeps (--relay-spin-us 2000: its wake-up off the token path; session 23 tried
# it over ZMQ, whose I/O threads still slept) shorten the scheduler -> detokenizer hop? Paired ABBAABBA.
# As it ran: before/ was `git archive 21c06e2 minisgl_edu`, and --relay-spin-us an uncommitted patch (6a792cd's reverted
# flag, config/serve/detokenize_loop); neither is in the tree (the flag was not adopted: RESULTS.md, session 28).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run uptime
AB=(python3 benchmarks/ab_serve.py --model-path $PWD/benchmarks/configs/smollm2-135m --device cuda --dummy-weights
    --rate 44 --num-prompts 128 --common "--max-total-tokens 1000000" --paired --restart-every 2 --bench "--client-procs 4")
run timeout 200 "${AB[@]}" --a "" --b "" --pythonpath-b $PWD/benchmarks/issue18/h200-s28/before --order ABBA \
    --log-dir "$OUT/ab1" --out "$OUT/ab_before.json"
run timeout 330 "${AB[@]}" --a "" --b "--relay-spin-us 2000" --order ABBAABBA --seed 200 \
    --log-dir "$OUT/ab2" --out "$OUT/ab_spin.json"
grep -h "waited .* ms in hop\|one wake took\|gc generation" $OUT/ab*/*.log | head -20 | tee -a $LOG
tar -czf $OUT/ab.tgz -C $OUT ab1 ab2 && rm -rf $OUT/ab1 $OUT/ab2
echo "call3: exit status $status" | tee -a "$LOG"

set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/trace.log
for m in "smollm2-135m 42" "qwen3-0.6b 21.5"; do
  set -- $m
  N=160 run timeout 150 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py benchmarks/configs/$1 $2 $OUT
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_$1.json 2.8
done
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for m in ("smollm2-135m", "qwen3-0.6b"):
    p = f"{out}/trace_bench_{m}.json"
    if os.path.exists(p):
        s = json.load(open(p)); s = s.get("results", s)
        print(m, {k: s.get(k) for k in ("itl_ms", "step_median_ms", "failed")})
PY
cd $OUT && tar -czf traces.tgz trace_*.json && rm -f trace_smollm2-135m.json trace_qwen3-0.6b.json; ls -la $OUT

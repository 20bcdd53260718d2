#!/usr/bin/env bash
# The GPU suite (issue 4): GPU tests, benchmarks P1-P4, notebooks 06/07 and a serve smoke test, on one
# CUDA machine. Results go to $OUT (default ./out): gpu_suite.log, gpu_checks.jsonl, results.json,
# RESULTS.md, the executed notebooks, serve.log.
#   bash scripts/gpu_suite.sh [tests] [bench] [notebooks] [serve]     (default: all four)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
STAGES=${*:-tests bench notebooks serve}
export MINISGL_GPU_REPORT=$OUT/gpu_checks.jsonl
LOG=$OUT/gpu_suite.log

run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run python3 -c "import torch, flashinfer; print('torch', torch.__version__, 'flashinfer', flashinfer.__version__, 'commit', '${MINISGL_COMMIT:-?}')"
for stage in $STAGES; do case $stage in
tests)
    run python3 -m pytest -q -rA -p no:cacheprovider tests/gpu ;;
bench)
    run python3 benchmarks/bench_gpu.py
    cp benchmarks/results.json benchmarks/RESULTS.md "$OUT"/ ;;
notebooks)
    python3 -m ipykernel install --user >/dev/null 2>&1
    run python3 scripts/run_notebooks.py "$OUT" notebooks/06_overlap.ipynb notebooks/07_kernels_and_graphs.ipynb ;;
serve)
    if [ -d minisgl_edu/server ]; then
        run timeout 240 python3 - <<'PY'
import json, os, subprocess, sys, time, urllib.request
cmd = [sys.executable, "-m", "minisgl_edu.serve", "--model", "benchmarks/configs/smollm2-135m", "--device", "cuda",
       "--dummy-weights", "--port", "19190", "--host", "127.0.0.1"]
log = open(os.path.join(os.environ.get("OUT", "out"), "serve.log"), "w")
p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
try:
    for _ in range(180):
        try:
            urllib.request.urlopen("http://127.0.0.1:19190/health", timeout=1)
            break
        except Exception:
            if p.poll() is not None:
                sys.exit(f"server exited with {p.returncode}")
            time.sleep(1)
    model = json.load(urllib.request.urlopen("http://127.0.0.1:19190/v1/models", timeout=10))["data"][0]["id"]
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}).encode()
    req = urllib.request.Request("http://127.0.0.1:19190/v1/chat/completions", body, {"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=60))
    print("serve smoke test:", out["choices"][0]["message"], out.get("usage"))
    assert out["usage"]["completion_tokens"] == 8 or out["choices"][0]["finish_reason"] == "stop"
finally:
    p.terminate()
    p.wait(30)
PY
    else
        echo "serve: minisgl_edu/server does not exist yet: skipped" | tee -a "$LOG"
    fi ;;
esac; done
echo "gpu_suite: exit status $status" | tee -a "$LOG"
exit $status

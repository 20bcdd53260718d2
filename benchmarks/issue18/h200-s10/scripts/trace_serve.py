"""Session 10: serve one model with --trace at a fixed Poisson rate, bench serve against it, stop (the trace is
written at shutdown). argv: model rate outdir [extra serve args...]"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import start_server, stop_server
model, rate, out = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4:]
name = os.path.basename(model)
trace = os.path.join(out, f"trace_{name}.json")
args = ["--trace", trace] + (["--skip-tokenizer-init"] if "qwen3" in model else []) + extra
proc, url = start_server(model, os.environ.get("DEV", "cuda"), True, args, os.path.join(out, f"trace_server_{name}.log"))
try:
    subprocess.run([sys.executable, "-m", "minisgl_edu.bench", "serve", "--base-url", url, "--request-rate", rate,
                    "--num-prompts", os.environ.get("N", "128"), *os.environ.get("LENS", "").split(), "--seed", "11", "--warmup", "8", "--no-progress",
                    "--out", os.path.join(out, f"trace_bench_{name}.json")], check=True)
finally:
    stop_server(proc)
print("trace bytes", os.path.getsize(trace) if os.path.exists(trace) else None)

"""Session 23: serve SmolLM2 with --hop-log at a Poisson rate, bench serve against it, then hop_itl.py.
argv: model rate outdir [extra serve args...]"""
import os, subprocess, sys
sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import start_server, stop_server
model, rate, out = sys.argv[1], sys.argv[2], sys.argv[3]
name = os.path.basename(model)
hops = os.path.join(out, f"hops_{name}.jsonl")
proc, url = start_server(model, os.environ.get("DEV", "cuda"), True, ["--hop-log", hops] + sys.argv[4:], os.path.join(out, f"hop_server_{name}.log"))
try:
    if os.path.exists(hops):
        os.remove(hops)  # the start-up's own lines
    subprocess.run([sys.executable, "-m", "minisgl_edu.bench", "serve", "--base-url", url, "--request-rate", rate,
                    "--num-prompts", os.environ.get("N", "256"), "--seed", "12", "--warmup", "8", "--no-progress",
                    "--client-procs", "4", "--out", os.path.join(out, f"hop_bench_{name}.json")], check=True)
finally:
    stop_server(proc)
subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "hop_itl.py"), hops], check=True)

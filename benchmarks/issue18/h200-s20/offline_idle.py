import subprocess, sys, time, re
from minisgl_edu.bench_serve import start_server, stop_server
from minisgl_edu.default_model import default_model_path
def offline(seed):
    out = subprocess.run([sys.executable, "-m", "minisgl_edu.bench", "offline", "--num-prompts", "16", "--input-len", "32", "128",
                          "--output-len", "32", "64", "--seed", str(seed), "--no-progress"], capture_output=True, text=True).stdout
    m = re.findall(r"([\d.]+) output tok/s", out) or re.findall(r"output[_ ]throughput\D*([\d.]+)", out)
    return m[-1] if m else out[-300:]
for s in (0, 1): print("no server", s, offline(s), flush=True)
proc, url = start_server(str(default_model_path()), "cpu", False, [], "/tmp/idle_serve.log")
time.sleep(3)
for s in (0, 1): print("idle server", s, offline(s), flush=True)
stop_server(proc)
for s in (0,): print("no server again", s, offline(s), flush=True)

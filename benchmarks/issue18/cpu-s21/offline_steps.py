"""Session 21: the offline engine's step times (default model, seed 0 of bench compare's workload), one line."""
import time, torch
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.bench_serve import random_requests
from minisgl_edu.engine import Engine
llm = LLM(device="cpu")
log = []
orig = Engine.forward
def timed(self, batch, wait=True):
    t = time.perf_counter(); out = orig(self, batch, wait); log.append(("prefill" if batch.is_prefill else "decode", batch.size, time.perf_counter() - t)); return out
Engine.forward = timed
warm = random_requests(8, 10_000, (16, 32), (4, 8), 10000)
llm.generate([r.prompt for r in warm], [SamplingParams(0.0, max_tokens=r.output_len, ignore_eos=True) for r in warm], use_tqdm=False)
for seed in (0,):
    reqs = random_requests(16, seed, (32, 128), (32, 64), 10000)
    log.clear(); t = time.perf_counter()
    llm.generate([r.prompt for r in reqs], [SamplingParams(0.0, max_tokens=r.output_len, ignore_eos=True) for r in reqs], use_tqdm=False)
    dt = time.perf_counter() - t
    print("offline s", round(dt, 2), "tok/s", round(sum(r.output_len for r in reqs) / dt, 1))
    print(' '.join(f"{p[0]}{b}:{1e3*x:.0f}" for p, b, x in log))

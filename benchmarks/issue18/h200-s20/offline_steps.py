import time, torch
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.bench_serve import random_requests
from minisgl_edu.engine import Engine
llm = LLM(device="cpu")
log = []
orig = Engine.forward
def timed(self, batch, wait=True):
    t = time.perf_counter(); out = orig(self, batch, wait); log.append((batch.phase if hasattr(batch, "phase") else ("prefill" if batch.is_prefill else "decode"), batch.size, sum(r.extend_len for r in batch.reqs) if batch.is_prefill else batch.size, time.perf_counter() - t)); return out
Engine.forward = timed
warm = random_requests(8, 10_000, (16, 32), (4, 8), 10000)
llm.generate([r.prompt for r in warm], [SamplingParams(0.0, max_tokens=r.output_len, ignore_eos=True) for r in warm], use_tqdm=False)
for seed in (0, 1):
    reqs = random_requests(16, seed, (32, 128), (32, 64), 10000)
    log.clear(); t = time.perf_counter()
    llm.generate([r.prompt for r in reqs], [SamplingParams(0.0, max_tokens=r.output_len, ignore_eos=True) for r in reqs], use_tqdm=False)
    dt = time.perf_counter() - t
    pre = [x for x in log if x[0] == "prefill"]; dec = [x for x in log if x[0] != "prefill"]
    print("seed", seed, "offline s", round(dt, 2), "tok/s", round(sum(r.output_len for r in reqs) / dt, 1), "prefill steps", [(b, n, round(1e3 * t)) for _, b, n, t in pre],
          "decode", len(dec), round(1e3 * sum(t for *_, t in dec) / len(dec), 1), "ms mean", flush=True)

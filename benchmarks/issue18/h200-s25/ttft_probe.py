"""Session 25, call 3: why did seed 104 (SmolLM2, 40 req/s, 128 requests) read TTFT p99 ~308 ms on both wires?
Fresh servers one after the other, each with a step trace; the same load (warm-up 8, then seed 104, four client
processes) as ab_serve; per request: arrival, TTFT, prompt length. Then seed 100 once as the control."""
import json
import os
import sys
import asyncio

sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import (random_requests, run_load, run_load_sharded, start_server,  # noqa: E402
                                     stop_server)



def main() -> None:
    out = os.environ["OUT"]
    model = "benchmarks/configs/smollm2-135m"
    rows = []
    for k, seed in enumerate([104, 104, 100]):
        trace = f"{out}/trace_{k}_{seed}.json"
        proc, url = start_server(model, "cuda", True, ["--max-total-tokens", "1000000", "--trace", trace],
                                 f"{out}/serve_{k}.log")
        try:
            warm = random_requests(8, seed + 10_000, (16, 32), (4, 8))
            asyncio.run(run_load(url, warm, progress=False))
            reqs = random_requests(128, seed)
            results, duration, _ = run_load_sharded(url, reqs, 4, request_rate=40, seed=seed, progress=False)
        finally:
            stop_server(proc)
        ttft = sorted((r.ttft for r in results), reverse=True)
        print(f"run {k} seed {seed}: failed {sum(not r.ok for r in results)}, TTFT top 5 ms "
              f"{[round(t * 1e3, 1) for t in ttft[:5]]}", flush=True)
        rows.append(dict(seed=seed, run=k, reqs=[dict(start=r.start, ttft=r.ttft, prompt_len=r.prompt_len,
                                                     out=r.output_tokens, itl_max=max(r.itl, default=0)) for r in results]))
    json.dump(rows, open(f"{out}/ttft_probe.json", "w"))


if __name__ == "__main__":  # the client processes are spawned: they import this file
    main()

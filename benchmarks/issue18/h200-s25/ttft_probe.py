"""Session 25, calls 3-5: a served load's TTFT and stall tail, traced (SmolLM2, 40 req/s, 128 requests, four client
processes, warm-up 8, as ab_serve runs it). Fresh server per run, each with a step trace; per request: arrival, TTFT,
prompt length, longest gap. Per run: the worst TTFTs, the longest gap of any stream, and the trace's mixed/prefill
steps that fit no graph (more than 3 prompts, or more prompt rows than the largest prompt graph's 2,045).

    python ttft_probe.py [--seeds 104,104,100] [--serve-args "..."] [--tag NAME]      (writes into $OUT)
"""
import argparse
import asyncio
import json
import os
import shlex
import sys

sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import (random_requests, run_load, run_load_sharded, start_server,  # noqa: E402
                                     stop_server)

LARGEST_GRAPH_ROWS, LANES = 2045, 3


def eager_steps(trace: str) -> tuple[list, float]:
    """(the steps that ran without a graph: (ms, prompts, prompt rows), the longest step's ms). A trace from before the
    steps said so (StepStats.graph): the prefill/mixed steps no prompt graph holds."""
    d = json.load(open(trace))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    fw = [e for e in ev if e.get("name") == "forward"][1:]  # the warm-up's prefill apart
    out = []
    for e in fw:
        a = e["args"]
        prompts, rows = a["batch_size"] - a["decode_rows"], a["tokens"] - a["decode_rows"]
        eager = not a["graph"] if "graph" in a else \
            a["phase"] != "decode" and (prompts > LANES or rows > LARGEST_GRAPH_ROWS)  # traces before 2026-12-04
        if eager:
            out.append((round(e["dur"] / 1e3, 2), prompts, rows))
    return out, max((e["dur"] / 1e3 for e in fw), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="104,104,100")
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    out = os.environ["OUT"]
    model = "benchmarks/configs/smollm2-135m"
    rows = []
    for k, seed in enumerate(int(x) for x in args.seeds.split(",")):
        trace = f"{out}/trace{args.tag}_{k}_{seed}.json"
        proc, url = start_server(model, "cuda", True, ["--max-total-tokens", "1000000", "--trace", trace,
                                                       *shlex.split(args.serve_args)], f"{out}/serve{args.tag}_{k}.log")
        try:
            warm = random_requests(8, seed + 10_000, (16, 32), (4, 8))
            asyncio.run(run_load(url, warm, progress=False))
            reqs = random_requests(128, seed)
            results, duration, _ = run_load_sharded(url, reqs, 4, request_rate=40, seed=seed, progress=False)
        finally:
            stop_server(proc)
        ttft = sorted((r.ttft for r in results), reverse=True)
        gap = max(max(r.itl, default=0) for r in results)
        eager, longest = eager_steps(trace) if os.path.exists(trace) else ([], float("nan"))
        print(f"run {k} seed {seed} [{args.serve_args}]: failed {sum(not r.ok for r in results)}, TTFT top 5 ms "
              f"{[round(t * 1e3, 1) for t in ttft[:5]]}, longest gap {gap * 1e3:.1f} ms, longest step {longest:.2f} ms, "
              f"steps no graph holds (ms, prompts, rows) {eager}", flush=True)
        rows.append(dict(seed=seed, run=k, serve_args=args.serve_args, eager=eager, longest_step_ms=longest,
                         reqs=[dict(start=r.start, ttft=r.ttft, prompt_len=r.prompt_len, out=r.output_tokens,
                                    itl_max=max(r.itl, default=0)) for r in results]))
    json.dump(rows, open(f"{out}/ttft_probe{args.tag}.json", "w"))


if __name__ == "__main__":  # the client processes are spawned: they import this file
    main()

"""Session 26, call 1: session 25's traced TTFT probe (SmolLM2, 40 req/s, 128 requests, four client processes, fresh
server per run), now also reading the server's `/metrics` after the warm-up and after the load, so the eager steps
of the load (`minisgl:steps_without_cuda_graph_total`) are told from the warm-up's; `--hop-log K` writes run K's hop
log (chapter 1) to place a late request's wait before the scheduler; `--spy K` samples run K's API process (the
server's main process) with py-spy, 1,000 stacks a second with their times (chrometrace), idle ones too.
MINISGL_GC_LOG_MS=2 in the environment makes every server process log its collections longer than 2 ms.

    python probe.py [--seeds 101,100] [--serve-args "..."] [--tag NAME] [--hop-log 0] [--spy 0]   (writes into $OUT)
"""
import argparse
import asyncio
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import (random_requests, run_load, run_load_sharded, start_server,  # noqa: E402
                                     stop_server)

_spec = importlib.util.spec_from_file_location("s25", os.path.join(os.path.dirname(__file__), "..", "h200-s25",
                                                                   "ttft_probe.py"))
s25 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(s25)


def eager_counts(url: str) -> dict:
    """{phase: steps without a CUDA graph so far} from /metrics."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        if fam.name == "minisgl:steps_without_cuda_graph":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[s.labels.get("phase", "?")] = s.value
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="101,100")
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--tag", default="")
    ap.add_argument("--hop-log", type=int, default=-1, help="the run (0-based) that writes a hop log")
    ap.add_argument("--spy", type=int, default=-1, help="the run (0-based) whose API process py-spy samples")
    args = ap.parse_args()
    out = os.environ["OUT"]
    model = "benchmarks/configs/smollm2-135m"
    rows = []
    for k, seed in enumerate(int(x) for x in args.seeds.split(",")):
        trace = f"{out}/trace{args.tag}_{k}_{seed}.json"
        hop = [f"--hop-log", f"{out}/hops{args.tag}_{k}_{seed}.jsonl"] if k == args.hop_log else []
        proc, url = start_server(model, "cuda", True, ["--max-total-tokens", "1000000", "--trace", trace, *hop,
                                                       *shlex.split(args.serve_args)], f"{out}/serve{args.tag}_{k}.log")
        spy = None
        if k == args.spy:
            spy = subprocess.Popen([shutil.which("py-spy") or "/tmp/site/bin/py-spy", "record", "-p", str(proc.pid),
                                    "-r", "1000", "--idle", "--nonblocking", "-f", "chrometrace",
                                    "-o", f"{out}/spy{args.tag}_{k}_{seed}.json"], stdout=subprocess.DEVNULL,
                                   stderr=open(f"{out}/spy{args.tag}_{k}.log", "w"))
        try:
            warm = random_requests(8, seed + 10_000, (16, 32), (4, 8))
            asyncio.run(run_load(url, warm, progress=False))
            m_warm = eager_counts(url)
            reqs = random_requests(128, seed)
            results, duration, _ = run_load_sharded(url, reqs, 4, request_rate=40, seed=seed, progress=False)
            m_load = eager_counts(url)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait(60)
            stop_server(proc)
        ttft = sorted((r.ttft for r in results), reverse=True)
        gap = max(max(r.itl, default=0) for r in results)
        eager, longest = s25.eager_steps(trace) if os.path.exists(trace) else ([], float("nan"))
        load_eager = {p: m_load.get(p, 0) - m_warm.get(p, 0) for p in m_load}
        print(f"run {k} seed {seed} [{args.serve_args}]: failed {sum(not r.ok for r in results)}, TTFT top 5 ms "
              f"{[round(t * 1e3, 1) for t in ttft[:5]]}, longest gap {gap * 1e3:.1f} ms, longest step {longest:.2f} ms, "
              f"traced steps without a graph after the first (ms, prompts, rows) {eager}; /metrics eager steps after "
              f"the warm-up {m_warm}, during the load {load_eager}", flush=True)
        rows.append(dict(seed=seed, run=k, serve_args=args.serve_args, eager=eager, longest_step_ms=longest,
                         metrics_warm=m_warm, metrics_load=load_eager,
                         reqs=[dict(start=r.start, ttft=r.ttft, prompt_len=r.prompt_len, out=r.output_tokens,
                                    itl_max=max(r.itl, default=0)) for r in results]))
    json.dump(rows, open(f"{out}/probe{args.tag}.json", "w"))


if __name__ == "__main__":  # the client processes are spawned: they import this file
    main()

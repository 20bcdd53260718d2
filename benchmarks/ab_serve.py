"""Issue 18: two server variants side by side on one machine, the same load alternated between them.

    python benchmarks/ab_serve.py --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
        --rate 21.5 --num-prompts 128 --common "--skip-tokenizer-init --max-total-tokens 400000" \
        --a "" --b "--no-early-receive" --order ABBA --out ab.json

`--pythonpath-a` / `--pythonpath-b` serve a variant from another checkout (the code before a change).
`--one-server` keeps one server (A's flags) and varies only the client between the variants (`--bench-a`,
`--bench-b`, e.g. "--client-procs 4"). Both servers start side by side and stay up (each KV pool capped by --common's --max-total-tokens, so both fit one GPU; `--restart-every N`: fresh ones every N runs);
the idle one only waits for mail. Each run is `bench serve` at a fixed Poisson rate with a fresh seed, the runs in
`--order`, so a drift of the host between runs falls on both variants alike (`--paired`: each pair of runs on the
same prompts and arrivals). Per run: ITL p50/p99, TTFT p99,
the median decode step from the server's /metrics histogram, ITL p99 / that median (issue 18's target, <= 2), and
the mean mixed step. Machines differ by more than most changes do: only a same-machine comparison like this one
tells what a change did.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from minisgl_edu.bench_serve import bench_serve_timed, parse_args, start_server, stop_server  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--device", default=None)
    ap.add_argument("--dummy-weights", action="store_true")
    ap.add_argument("--rate", type=float, required=True, help="Poisson arrivals per second")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--common", default="", help="serve flags both variants get")
    ap.add_argument("--a", default="", help="serve flags of variant A (default: none, the defaults)")
    ap.add_argument("--b", default=None, help="serve flags of variant B (required unless --one-server)")
    ap.add_argument("--order", default="ABBA")
    ap.add_argument("--bench", default="", help="more `bench serve` flags (a dry run: '--input-len 8 16 --output-len 4 8')")
    ap.add_argument("--bench-a", default="", help="`bench serve` flags of variant A only (a client setting)")
    ap.add_argument("--bench-b", default="", help="`bench serve` flags of variant B only, e.g. '--client-procs 4'")
    ap.add_argument("--pythonpath-a", default=None, help="serve variant A from this checkout (a before/after run)")
    ap.add_argument("--pythonpath-b", default=None, help="serve variant B from this checkout")
    ap.add_argument("--one-server", action="store_true",
                    help="one server (A's flags) for both variants: they differ only in --bench-a / --bench-b")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--paired", action="store_true",
                    help="runs 2k and 2k+1 share a seed (the same prompts and arrivals): with ABBA orders, paired A/B")
    ap.add_argument("--restart-every", type=int, default=0,
                    help="fresh servers every N runs (0: one pair of servers for all): with N=2 or 4, more server "
                         "instances stand behind the runs, so a server's placement on the host is told from the change")
    ap.add_argument("--log-dir", default="out")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.b is None and not args.one_server:
        ap.error("--b is required (the second server's flags), unless --one-server")
    if args.one_server and args.b is not None:
        ap.error("--b names a second server, and --one-server runs one (A's flags): vary --bench-a / --bench-b instead")
    flags = {"A": args.a, "B": args.a if args.one_server else args.b}
    bench = {"A": args.bench_a, "B": args.bench_b}
    servers = {}

    def start_both() -> None:  # side by side, both up before any run: no start-up overlaps a measured run
        from concurrent.futures import ThreadPoolExecutor
        for proc, _ in servers.values():
            stop_server(proc)
        names = "A" if args.one_server else "AB"
        with ThreadPoolExecutor(len(names)) as pool:
            started = {v: pool.submit(start_server, os.path.abspath(args.model_path), args.device, args.dummy_weights,
                                      shlex.split(args.common) + shlex.split(flags[v]),
                                      os.path.abspath(os.path.join(args.log_dir, f"ab_{v}.serve.log")),
                                      pythonpath=getattr(args, f"pythonpath_{v.lower()}")) for v in names}
        servers.clear()
        failed = [fut.exception() for fut in started.values() if fut.exception() is not None]
        servers.update({v: fut.result() for v, fut in started.items() if fut.exception() is None})
        if failed:  # the `finally` below stops the one that did start
            raise failed[0]
    try:
        runs = []
        for i, v in enumerate(args.order):
            if i == 0 or (args.restart_every and i % args.restart_every == 0):
                start_both()
                instance = i // args.restart_every if args.restart_every else 0
            url, seed = servers["A" if args.one_server else v][1], args.seed + (i // 2 if args.paired else i)
            a = parse_args(["serve", "--base-url", url, "--num-prompts", str(args.num_prompts), "--request-rate",
                            str(args.rate), "--seed", str(seed), "--no-progress", "--warmup", "8",
                            *shlex.split(args.bench), *shlex.split(bench[v])])
            s = bench_serve_timed(a, url)
            med = s["step_median_ms"].get("decode", float("nan"))
            row = dict(variant=v, flags=flags[v], bench=bench[v], seed=seed, instance=instance, failed=s["failed"],
                       output_throughput=s["output_throughput"], ttft_p99=s["ttft_ms"]["p99"],
                       itl_p50=s["itl_ms"]["median"], itl_p99=s["itl_ms"]["p99"], decode_median=med,
                       ratio=s["itl_ms"]["p99"] / med, clock=s.get("arrival_clock", "read"),
                       itl_read_p99=s["itl_read_ms"]["p99"], ratio_read=s["itl_read_ms"]["p99"] / med,
                       step_p99=s.get("step_p99_ms", float("nan")), api_itl_p99=s.get("api_itl_p99_ms", float("nan")),
                       emit_p99=s.get("emit_p99_ms", float("nan")), hop_ms=s.get("hop_ms", {}),
                       mixed_mean=s["step_ms"].get("mixed", float("nan")),
                       decode_mean=s["step_ms"].get("decode", float("nan")), cpu=s.get("cpu"))
            runs.append(row)
            print(f"run {i} {v} [{flags[v] or 'defaults'} {bench[v]}]: ITL p50/p99 {row['itl_p50']:.2f}/{row['itl_p99']:.2f} ms, "
                  f"median decode step {med:.2f} ms, ITL p99 / step {row['ratio']:.2f} ({row['clock']} clock; by read time "
                  f"{row['ratio_read']:.2f}), step p99 {row['step_p99']:.2f} ms, emitted / at the API ITL p99 {row['emit_p99']:.2f} / {row['api_itl_p99']:.2f} ms, TTFT p99 {row['ttft_p99']:.1f} ms, "
                  f"mixed step {row['mixed_mean']:.2f} ms, {row['output_throughput']:.0f} tok/s, failed {row['failed']}"
                  + "".join(f"\n    hop {h}: median / p99 {q['median']:.3f} / {q['p99']:.3f} ms" for h, q in row["hop_ms"].items())
                  + "\n    CPU us/token (main thread preempted /s): " + ", ".join(
                      f"{k} {c['us_per_token']:.1f} ({c.get('preempted_per_s', float('nan')):.0f})"
                      for k, c in sorted((row["cpu"] or {}).items()) if k != "client_procs"),
                  flush=True)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    for v in "AB":
        rs = [r["ratio"] for r in runs if r["variant"] == v]
        print(f"{v} [{flags[v] or 'defaults'} {bench[v]}]: ITL p99 / median decode step {', '.join(f'{x:.2f}' for x in rs)} "
              f"(mean {statistics.mean(rs):.2f})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "runs": runs}, f, indent=1, default=str)
    return 1 if any(r["failed"] for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())

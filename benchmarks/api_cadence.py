"""Issue 18: what the API process alone adds to the ITL tail. The real API (`Frontend` + FastAPI + uvicorn) in front
of a stand-in for the workers that answers every stream in lockstep at an exact cadence (chapter 9).

    python benchmarks/api_cadence.py [--streams 48] [--interval-ms 1.5] [--tokens 300] [--arrivals 0]
                                     [--serve-args "--naive-stream"] [--repeats 2]

The stand-in (its own process, no asyncio) binds the tokenizer's ZMQ address and connects to the frontend's, as the
tokenizer and the detokenizer do (a plain socket; ZMQ with `--serve-args " --no-reply-socket"`). Every `--interval-ms`
it sends one BatchFrontendMsg holding one reply per live stream (the plain ones as ReplyColumns, as the detokenizer
does), so each stream's true interval is the interval. The client is `bench serve`'s (`--client-procs` processes).
With `--arrivals R` a further stream starts R times a second (each one a new HTTP request and, later, a finish, as a
served load has): their handling shares the API's loop with the streams' writes. Printed per run: the ITL p50/p90/p99
the client measured against the truth (by each read's arrival), how late the stand-in itself ran, and the API
process's CPU time per token.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu.bench_serve import BenchRequest, free_port, run_load_sharded, stats_ms, summarize  # noqa: E402

MODEL = str(Path(__file__).resolve().parent / "configs" / "smollm2-135m")  # only its name and context length are read


def stand_in(root: str, reply_socket: bool, interval_s: float, ready, done, late_q) -> None:
    """The workers' stand-in: TokenizeMsgs in, one reply per live stream every interval out."""
    import zmq

    from minisgl_edu.messages import AbortMsg, BatchFrontendMsg, TokenizeMsg, UserReply, decode, encode, reply_columns, unbatch
    from minisgl_edu.server.queues import Addresses, push
    addrs = Addresses(root, 1, reply_socket)
    inbox = zmq.Context.instance().socket(zmq.PULL)
    inbox.bind(addrs.tokenizer(0))
    out = push(addrs.frontend)  # the detokenizer's wire: a plain socket, or ZMQ with --no-reply-socket
    ready.set()
    live: dict[int, list[int]] = {}  # uid -> [tokens sent, max_tokens, prompt tokens]
    late, t_next = [], time.perf_counter() + interval_s
    while not done.is_set():
        while time.perf_counter() < t_next:  # spin: the stand-in's own timing must not be the jitter
            pass
        if live:
            late.append(time.perf_counter() - t_next)
        while inbox.poll(0):
            for m in unbatch(decode(inbox.recv())):
                if isinstance(m, TokenizeMsg):
                    live[m.uid] = [0, m.sampling_params.max_tokens, len(m.input_ids or [])]
                elif isinstance(m, AbortMsg):
                    live.pop(m.uid, None)
        replies = []
        for uid, st in list(live.items()):  # in arrival order, the same every time
            st[0] += 1
            fin = st[0] >= st[1]
            replies.append(UserReply(uid, "x", fin, "length" if fin else None, st[2] if st[0] == 1 else 0, st[0]))
            if fin:
                del live[uid]
        if replies:
            out.put_raw(encode(BatchFrontendMsg(reply_columns(replies))))
        t_next += interval_s
        if t_next < time.perf_counter():  # never burst to catch up: each tick is one interval after the last
            t_next = time.perf_counter() + interval_s
    late_q.put(late)


def api_server(root: str, port: int, serve_args: list[str]) -> None:
    import uvicorn

    from minisgl_edu.server.api import Frontend, create_app
    from minisgl_edu.serve import parse_args
    from minisgl_edu.server.launcher import http_stack
    from minisgl_edu.server.queues import Addresses
    cfg, _ = parse_args(["--model", MODEL, "--device", "cpu", "--port", str(port), *serve_args])  # serve's own flags
    frontend = Frontend(Addresses(root, 1, cfg.reply_socket), cfg)
    loop, http = http_stack(cfg.http_parser)
    uvicorn.Server(uvicorn.Config(create_app(cfg, frontend), host="127.0.0.1", port=port, loop=loop, http=http,
                                  log_level="warning")).run()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def measure(args, serve_args: list[str]) -> dict:
    import httpx
    root = __import__("tempfile").mkdtemp(prefix="minisgl-")
    ready, done, late_q = mp.Event(), mp.Event(), mp.Queue()
    port = free_port()
    from minisgl_edu.serve import parse_args
    reply_socket = parse_args(["--model", MODEL, "--device", "cpu", *serve_args])[0].reply_socket  # the API's wire
    backend = mp.Process(target=stand_in, args=(root, reply_socket, args.interval_ms / 1e3, ready, done, late_q),
                         daemon=True)
    api = mp.Process(target=api_server, args=(root, port, serve_args), daemon=True)
    backend.start()
    ready.wait(30)
    api.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    reqs = [BenchRequest(list(range(1, 65)), 64, args.tokens) for _ in range(args.streams)]
    rate = float("inf")
    if args.arrivals > 0:  # the streams' requests keep arriving: a served load's new requests and finishes
        n_extra = int(args.arrivals * args.tokens * args.interval_ms / 1e3)
        reqs += [BenchRequest(list(range(1, 65)), 64, args.tokens) for _ in range(n_extra)]
        rate = args.arrivals
    spy = None
    if args.spy:  # py-spy's raw stacks of the API process (benchmarks/spy_tree.py reads them)
        import subprocess
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(api.pid), "--format", "raw", "--rate", "500",
                                "--nonblocking", "--output", args.spy], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    cpu0 = cpu_seconds(api.pid)
    results, duration, _ = run_load_sharded(url, reqs, args.client_procs, request_rate=rate,
                                            max_concurrency=args.streams if args.arrivals > 0 else None, progress=False)
    cpu = cpu_seconds(api.pid) - cpu0
    direct = next((float(line.split()[-1]) for line in httpx.get(url + "/metrics").text.splitlines()
                   if line.startswith("minisgl:sse_direct_writes_total")), None)
    done.set()
    if spy is not None:
        spy.send_signal(__import__("signal").SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(30)
    late = late_q.get(timeout=30)
    api.terminate()
    backend.join(5)
    api.join(5)
    s = summarize(results, duration)
    itl = [x for r in results for x in r.itl]
    return {"serve_args": serve_args, "failed": s["failed"], "itl_ms": stats_ms(itl),
            "stand_in_late_ms_p99": 1e3 * sorted(late)[int(0.99 * (len(late) - 1))] if late else 0.0,
            "api_us_per_token": 1e6 * cpu / max(s["total_output_tokens"], 1), "tokens": s["total_output_tokens"],
            "direct_writes": direct}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=48)
    ap.add_argument("--interval-ms", type=float, default=1.5)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--arrivals", type=float, default=0.0, help="new streams per second (0: all at once, no more)")
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--serve-args", nargs="*", default=[""], help="one API variant per string of serve flags, e.g. '' ' --no-direct-write' (a leading space: not an option here)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--spy", default=None, help="py-spy the API process into this file (raw stacks)")
    args = ap.parse_args()
    print(f"{args.streams} streams, one reply each every {args.interval_ms} ms (the truth), {args.tokens} tokens each"
          + (f", {args.arrivals} new streams a second" if args.arrivals else ""))
    runs = []
    for _ in range(args.repeats):
        for variant in args.serve_args:
            r = measure(args, shlex.split(variant))
            runs.append(r)
            s = r["itl_ms"]
            print(f"  API {variant or '(default)':24s}: ITL p50 {s['median']:.3f}  p90 {s['p90']:.3f}  p99 {s['p99']:.3f} ms "
                  f"(p99 - truth {s['p99'] - args.interval_ms:+.3f} ms); API {r['api_us_per_token']:.1f} us/token; "
                  f"stand-in late p99 {r['stand_in_late_ms_p99']:.3f} ms; written directly {r['direct_writes']:.0f} of "
                  f"{r['tokens']} tokens; failed {r['failed']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

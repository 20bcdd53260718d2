"""Issue 18: how much of a measured ITL tail is the benchmark client's own? A server whose true inter-token interval
is known exactly, measured by `bench serve`'s client.

    python benchmarks/client_jitter.py [--streams 40] [--interval-ms 1.4] [--tokens 200] [--loop asyncio uvloop]
                                       [--client-procs 1 4]

A stand-in server (its own process, plain blocking sockets, no asyncio) accepts `--streams` streamed completions,
then every `--interval-ms` writes one SSE event to each stream, in the same order every time, so each stream's true
interval is the interval itself (the stand-in also reports how late it was). Served SmolLM2 steps emit ~40 tokens
every ~1.4 ms, and the client reads them one stream at a time: the ITL it reports is the true interval plus how its
own loop spread the burst. Prints the client's ITL p50/p90/p99 against the truth, per event loop, and with the
streams shared among several client processes (`--client-procs`, asyncio loops; `bench serve --client-procs`), each
twice from the same run: timed by when the client read each event, and by when it arrived (the kernel's stamp).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu.bench_serve import BenchRequest, run_load, run_load_sharded, stats_ms, summarize  # noqa: E402


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def stand_in(port_q, streams: int, tokens: int, interval_s: float, late_q) -> None:
    """Serve one /v1/models, then `streams` streamed completions in lockstep, one event each per interval."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(streams + 8)
    port_q.put(srv.getsockname()[1])
    conns = []
    while len(conns) < streams:
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(65536)
        if head.startswith(b"GET /v1/models"):
            body = json.dumps({"object": "list", "data": [{"id": "stand-in", "object": "model"}]}).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            c.close()
            continue
        hdr, _, rest = head.partition(b"\r\n\r\n")
        length = next(int(x.split(b":")[1]) for x in hdr.split(b"\r\n") if x.lower().startswith(b"content-length"))
        while len(rest) < length:
            rest += c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        conns.append(c)
    event = lambda k: chunk(b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x",' +  # noqa: E731
                            b'"token_ids":[%d],"finish_reason":null}]}\n\n' % k)
    late = []
    t_next = time.perf_counter() + 0.05
    for k in range(tokens):
        while time.perf_counter() < t_next:  # spin: the stand-in's own timing must not be the jitter
            pass
        late.append(time.perf_counter() - t_next)
        payload = event(k)
        for c in conns:  # the same order every time: each stream's true interval is exactly interval_s
            c.sendall(payload)
        t_next += interval_s
    usage = chunk(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d}}\n\n' % tokens)
    for c in conns:
        c.sendall(usage + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        c.close()
    late_q.put(late)


def measure(streams: int, tokens: int, interval_s: float, loop: str, procs: int = 1) -> dict:
    port_q, late_q = mp.Queue(), mp.Queue()
    p = mp.Process(target=stand_in, args=(port_q, streams, tokens, interval_s, late_q), daemon=True)
    p.start()
    url = f"http://127.0.0.1:{port_q.get(timeout=30)}"
    reqs = [BenchRequest([1, 2, 3], 3, tokens) for _ in range(streams)]
    factory = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    if procs > 1:
        results, _, _ = run_load_sharded(url, reqs, procs, progress=False)
    else:
        with asyncio.Runner(loop_factory=factory) as runner:
            results, _ = runner.run(run_load(url, reqs, progress=False))
    late = late_q.get(timeout=60)
    p.join(timeout=10)
    bad = [r.error for r in results if not r.ok]
    assert not bad, bad[:3]
    itl, itl_read = [x for r in results for x in r.itl], [x for r in results for x in r.itl_read]
    clocks = sorted({r.clock for r in results})
    return {"loop": loop, "procs": procs, "clock": "/".join(clocks), "itl_ms": stats_ms(itl),
            "itl_read_ms": stats_ms(itl_read), "stand_in_late_ms_max": 1e3 * max(late),
            "shared_read_pct": summarize(results, 1.0)["shared_read_pct"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=40)
    ap.add_argument("--interval-ms", type=float, default=1.4)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--loop", nargs="+", default=["asyncio", "uvloop"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--client-procs", type=int, nargs="+", default=[1], help="also with the streams shared by N "
                    "client processes (asyncio loops)")
    ap.add_argument("--out", default=None, help="write every run as JSON here")
    args = ap.parse_args()
    print(f"{args.streams} streams, one event each every {args.interval_ms} ms (the truth), {args.tokens} events")
    variants = [(loop, 1) for loop in args.loop] if 1 in args.client_procs else []
    variants += [("asyncio", n) for n in args.client_procs if n > 1]
    runs = []
    for _ in range(args.repeats):
        for loop, procs in variants:
            r = measure(args.streams, args.tokens, args.interval_ms / 1e3, loop, procs)
            runs.append(r)
            for name, key in (("read time", "itl_read_ms"), (f"arrival ({r['clock']})", "itl_ms")):
                s = r[key]
                print(f"  client loop {loop:8s} x{procs}, by {name:16s}: ITL p50 {s['median']:.3f}  p90 {s['p90']:.3f}  "
                      f"p99 {s['p99']:.3f} ms (p99 - truth {s['p99'] - args.interval_ms:+.3f} ms; the stand-in ran late "
                      f"by at most {r['stand_in_late_ms_max']:.3f} ms)", flush=True)
            print(f"    {r['shared_read_pct']:.2f} % of events shared a read with a later one (both clocks time them late)")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

"""Robustness — faults: a worker dies, or a client stops reading. Does the server fail loudly and cleanly?

Each worker kind is SIGKILLed in turn (tokenizer, detokenizer, scheduler rank 0, and rank 1 of a
tp=2 server) while streams are in flight. Then: /health answers 503, every in-flight stream ends
with an error (none hangs, none ends as if complete), the launcher exits non-zero within 10 s, and
no process of the server's tree is left.

The servers run a tiny random-weight Llama (4 query heads, so tp=2 divides them) with the default
model's tokenizer: a fresh server per kill must start in seconds, and what is under test is the
process plumbing, not the model.
"""
from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from serverproc import Server

KILL_DEADLINE = 10.0  # the launcher must be gone this soon after a worker dies
STREAMS = 4
LONG = 1500  # tokens each in-flight stream asks for: it is still running when the worker dies


def start_streams(server: Server, n: int) -> tuple[list[dict], list[threading.Thread], threading.Barrier]:
    """n streaming completions in threads; the barrier trips once each has its first chunk."""
    results = [{"chunks": 0, "done": False, "error": None, "ended_at": None} for _ in range(n)]
    started = threading.Barrier(n + 1)

    def run(res: dict) -> None:
        body = {"prompt": "Tell me a long story.", "max_tokens": LONG, "ignore_eos": True, "temperature": 0,
                "stream": True}
        passed = False
        try:
            with httpx.Client(base_url=server.url, timeout=30) as c, \
                    c.stream("POST", "/v1/completions", json=body) as r:
                res["status"] = r.status_code
                for line in r.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        res["done"] = True
                        break
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        res["error"] = chunk["error"]["message"]
                        break
                    res["chunks"] += 1
                    if not passed:
                        passed = True
                        started.wait(60)
        except httpx.HTTPError as e:  # the connection dropped: also an error the client sees
            res["error"] = repr(e)
        finally:
            res["ended_at"] = time.monotonic()
            if not passed:
                started.abort()

    threads = [threading.Thread(target=run, args=(res,), daemon=True) for res in results]
    for t in threads:
        t.start()
    return results, threads, started


@pytest.mark.parametrize("victim,args", [
    ("tokenizer-0", ()),
    ("detokenizer", ()),
    ("scheduler-rank0", ()),
    ("scheduler-rank1", ("--tp", "2")),
])
def test_killed_worker_fails_loudly_and_leaves_nothing(make_server, tiny_dir, victim, args):
    server = make_server("--model", tiny_dir, "--dummy-weights", "--max-running-reqs", "16", *args)
    workers = server.workers()
    assert victim in workers, workers
    pids = {p.pid for p in server.procs()}
    results, threads, started = start_streams(server, STREAMS)
    started.wait(120)  # every stream is producing tokens
    workers[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()

    saw_503 = False
    while server.proc.poll() is None and time.monotonic() - killed_at < KILL_DEADLINE + 5:
        try:
            r = httpx.get(server.url + "/health", timeout=1)
            if r.status_code == 503:
                saw_503 = True
                assert victim in r.json()["reason"], r.text
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    exit_code = server.proc.poll()
    exited_after = time.monotonic() - killed_at
    for t in threads:
        t.join(KILL_DEADLINE)

    assert exit_code is not None and exited_after <= KILL_DEADLINE, \
        f"launcher still running {exited_after:.1f}s after {victim} died:\n{server.log()[-3000:]}"
    assert exit_code != 0, "a dead worker must make the launcher exit non-zero"
    assert saw_503, "/health never reported the dead worker"
    for res in results:
        assert not res["done"] and res["error"], f"an in-flight stream ended without an error: {res}"
        assert res["ended_at"] - killed_at <= KILL_DEADLINE, "a stream hung after the worker died"
    server.known |= pids
    assert not server.survivors(), f"left behind: {server.survivors()}"
    print(f"\n{victim}: launcher exit {exit_code} after {exited_after:.1f}s; "
          f"errors seen by the streams: {sorted({r['error'][:60] for r in results})}")


def send_queue_bytes(local_port: int, remote_port: int) -> int | None:
    """Bytes waiting in the kernel's send queue of the TCP socket local_port -> remote_port (Linux)."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if (int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)) == (local_port, remote_port):
                return int(fields[4].split(":")[0], 16)
    return None


def test_slow_reader_does_not_block_other_clients(make_server, tiny_dir):
    """A client that sends a streaming request and then never reads: everyone else is served on time.

    An 8000-character model name makes every SSE chunk ~8 KB, so the stalled stream's ~12 MB overflow
    the kernel's socket buffers (a few MB) and the server itself must hold back that one response.
    """
    server = make_server("--model", tiny_dir, "--dummy-weights", "--max-running-reqs", "16",
                         "--served-model-name", "m" * 8000)
    ref = {}
    with server.client() as c:
        for i in range(6):
            r = c.post("/v1/completions", json={"prompt": f"Item {i}:", "max_tokens": 24, "temperature": 0})
            ref[i] = r.json()["choices"][0]["text"]
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", server.port))
    body = json.dumps({"prompt": "Never read me.", "max_tokens": LONG, "ignore_eos": True, "stream": True}).encode()
    stalled.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    backed_up = lambda: send_queue_bytes(server.port, stalled.getsockname()[1]) or 0  # noqa: E731
    try:
        deadline = time.monotonic() + 60
        while backed_up() < 1 << 20:  # the server's socket holds >= 1 MB the client has not read
            assert time.monotonic() < deadline, f"the stalled stream never backed up ({backed_up()} bytes)"
            time.sleep(0.2)
        t0 = time.monotonic()
        with server.client(timeout=60) as c:
            for _ in range(2):
                for i in range(6):
                    r = c.post("/v1/completions", json={"prompt": f"Item {i}:", "max_tokens": 24, "temperature": 0})
                    assert r.status_code == 200 and r.json()["choices"][0]["text"] == ref[i]
                with c.stream("POST", "/v1/completions", json={"prompt": "Item 0:", "max_tokens": 24,
                                                               "temperature": 0, "stream": True}) as r:
                    text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in r.iter_lines()
                                   if line.startswith("data: {"))
                assert text == ref[0]
        elapsed = time.monotonic() - t0
        unread = backed_up()
        assert unread >= 1 << 20, "the stalled client was never really stalled"
    finally:
        stalled.close()  # the client goes away: its request is aborted (or its output dropped)
    stats = server.wait_idle()
    assert stats["integrity"] == "ok" and stats["free_pages"] + stats["cached_pages"] == stats["num_pages"], stats
    assert server.healthy()
    print(f"\n14 requests beside a stalled stream ({unread >> 10} KB unread in its socket) took {elapsed:.1f}s")

"""Issue 18 / chapter 1: one hop of the replies' wire, ZMQ (`ipc://`) against a plain UNIX socket (`unix://`), through
the server's own `queues.pull`/`push`. A ping-pong between two processes, halved: the one-way time of a message whose
receiver sleeps in `get_raw`, as the detokenizer and the API do between steps. The sender waits `--gap-ms` between
messages (a decode step apart), so every message finds its receiver asleep. Also printed: the sender's own time in
`put_raw`, which a scheduler step pays (a plain socket's write wakes the receiver from inside it).

    python benchmarks/reply_wire.py [--messages 3000] [--bytes 600 20000] [--gap-ms 1.5] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu.server.queues import pull, push  # noqa: E402

WIRES = {"zmq": "ipc://", "socket": "unix://"}


def echo(inbox_addr: str, reply_addr: str, n: int) -> None:
    inbox, out = pull(inbox_addr), push(reply_addr)
    for _ in range(n):
        out.put_raw(inbox.get_raw())
    out.close()


def one_way_us(wire: str, size: int, n: int, gap_s: float) -> list[float]:
    root = tempfile.mkdtemp(prefix="minisgl-")
    there, back = f"{WIRES[wire]}{root}/there", f"{WIRES[wire]}{root}/back"
    inbox = pull(back)
    peer = mp.get_context("spawn").Process(target=echo, args=(there, back, n))
    peer.start()
    out, msg, times, sends = push(there), b"x" * size, [], []
    for _ in range(n):
        t = time.perf_counter()
        out.put_raw(msg)
        sends.append((time.perf_counter() - t) * 1e6)  # the sender's own cost: what a scheduler step pays
        inbox.get_raw()
        times.append((time.perf_counter() - t) / 2 * 1e6)
        time.sleep(gap_s)
    peer.join(30)
    inbox.close()
    return sorted(times[n // 20:]), sorted(sends[n // 20:])  # the first 5 %: connections and caches warming up


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--bytes", type=int, nargs="+", default=[600, 20000])
    ap.add_argument("--gap-ms", type=float, default=1.5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for size in args.bytes:
        for rep in range(args.repeats):
            for wire in WIRES:  # side by side in one run, alternating
                t, sent = one_way_us(wire, size, args.messages, args.gap_ms / 1e3)
                row = {"wire": wire, "bytes": size, "repeat": rep, "p50_us": pct(t, .5), "p90_us": pct(t, .9),
                       "p99_us": pct(t, .99), "send_p50_us": pct(sent, .5), "send_p99_us": pct(sent, .99)}
                rows.append(row)
                print(f"{wire:6s} {size:6d} B  one way: p50 {row['p50_us']:6.1f}  p90 {row['p90_us']:6.1f}  "
                      f"p99 {row['p99_us']:6.1f} us; the send itself p50 {row['send_p50_us']:5.1f}  "
                      f"p99 {row['send_p99_us']:5.1f} us", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

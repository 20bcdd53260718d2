"""Session 27: sample a running server's processes with py-spy over one window of a `bench compare` run.

Waits for the server log's "serving ... on http://HOST:PORT" line, reads the processes' pids from /health, waits for
TRIGGER in the bench's own output (default "repeat 0:", printed when the all-at-once run ends and the rate sweep
starts), then records every process (API, scheduler, detokenizer, tokenizer) for SECONDS at RATE samples a second,
idle stacks too, with their times (chrometrace); the wall time of the start goes to spy_start.json to line the
samples up with the hop log.

    python spy_watch.py SERVER_LOG BENCH_LOG OUTDIR [--trigger "repeat 0:"] [--seconds 14] [--rate 1000]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import time

import httpx


def wait_for(path: str, pattern: str, timeout: float = 300) -> re.Match:
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and (m := re.search(pattern, open(path, errors="replace").read())):
            return m
        time.sleep(0.05)
    raise TimeoutError(f"{pattern!r} not in {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("server_log")
    ap.add_argument("bench_log")
    ap.add_argument("outdir")
    ap.add_argument("--trigger", default="repeat 0:")
    ap.add_argument("--seconds", type=int, default=14)
    ap.add_argument("--rate", type=int, default=1000)
    args = ap.parse_args()
    url = wait_for(args.server_log, r"serving \S+ on (http://[\d.]+:\d+)").group(1)
    h = httpx.get(url + "/health", timeout=10).json()
    pids = {k: v for k, v in (h.get("workers") or {}).items() if isinstance(v, int)} | {"api": h["pid"]}
    print("spy_watch: pids", pids, flush=True)
    wait_for(args.bench_log, re.escape(args.trigger), timeout=600)
    spy = shutil.which("py-spy") or "/tmp/site/bin/py-spy"
    start = time.time()
    procs = [subprocess.Popen([spy, "record", "-p", str(pid), "-r", str(args.rate), "-d", str(args.seconds), "--idle",
                               "--nonblocking", "-f", "chrometrace", "-o", f"{args.outdir}/spy_{name}.json"],
                              stdout=subprocess.DEVNULL, stderr=open(f"{args.outdir}/spy_{name}.log", "w"))
             for name, pid in pids.items()]
    json.dump({"start": start, "pids": pids}, open(f"{args.outdir}/spy_start.json", "w"))
    for p in procs:
        p.wait(args.seconds + 60)
    print("spy_watch: done", flush=True)


if __name__ == "__main__":
    main()

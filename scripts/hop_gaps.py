"""Cold and warm boundary crossings of chapter 1, measured with the hop log (`--hop-log`).

    python3 scripts/hop_gaps.py [--device cpu|cuda] [--requests N]

Starts the workers of a one-rank server (as notebook 01 does), sends N chat requests one after the
other, and prints per request the gap of every hop of its first token: api -> tokenizer, tokenizer's
own work, tokenizer -> scheduler, the prefill, scheduler -> detokenizer, detokenizer -> api. Request 0
meets freshly started processes (cold: first use of each socket, first tokenizer call, first forward);
the later ones show the warm crossings. Run it on an idle machine: a busy CPU turns every crossing into
a wait for a free core.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minisgl_edu.default_model import default_model_path  # noqa: E402
from minisgl_edu.req import SamplingParams  # noqa: E402
from minisgl_edu.server.common import ServerConfig  # noqa: E402
from minisgl_edu.server.launcher import start_workers, stop_workers  # noqa: E402
from minisgl_edu.server.shell import Client  # noqa: E402

HOPS = [("api", "send TokenizeMsg"), ("tokenizer-0", "recv TokenizeMsg"), ("tokenizer-0", "send UserMsg"),
        ("scheduler-rank0", "recv UserMsg"), ("scheduler-rank0", "send DetokenizeMsg"),
        ("detokenizer", "recv DetokenizeMsg"), ("detokenizer", "send UserReply"), ("api", "recv UserReply")]
NAMES = ["api->tok", "tokenize", "tok->sched", "prefill", "sched->detok", "detokenize", "detok->api"]


def first_token_gaps(hops: list[dict], uid: int) -> list[float]:
    """ms between consecutive hops of request `uid`'s first token, in HOPS order."""
    times = []
    for proc, event in HOPS:
        times.append(next(h["t"] for h in hops if h["uid"] == uid and h["proc"] == proc and h["event"] == event))
    return [(b - a) * 1e3 for a, b in zip(times, times[1:])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=4)
    args = ap.parse_args()
    trace_path = os.path.join(tempfile.mkdtemp(), "hops.jsonl")
    cfg = ServerConfig(model_path=default_model_path(), served_name="SmolLM2-135M-Instruct", device=args.device, hop_log=trace_path)
    workers = start_workers(cfg)
    try:
        client = Client(workers, cfg)
        for i in range(args.requests):
            msgs = [{"role": "user", "content": f"What is the capital of country number {i}?"}]
            list(client.generate(msgs, SamplingParams(temperature=0.0, max_tokens=4)))
        client.close()
    finally:
        stop_workers(workers)
    hops = [json.loads(line) for line in open(trace_path)]
    print(f"{'request':<10}" + "".join(f"{n:>14}" for n in NAMES) + "   (ms)")
    rows = [first_token_gaps(hops, uid) for uid in range(args.requests)]
    for uid, gaps in enumerate(rows):
        print(f"{uid:<10}" + "".join(f"{g:14.1f}" for g in gaps) + ("   cold" if uid == 0 else ""))
    if len(rows) > 1:
        med = [statistics.median(col) for col in zip(*rows[1:])]
        print(f"{'warm med':<10}" + "".join(f"{g:14.1f}" for g in med))


if __name__ == "__main__":
    main()

"""Session 27: the detokenizer through `gpu_serve.sh`'s first rate run, replayed on this CPU.

Every session-26 `gpu_serve.sh` run of SmolLM2 stalled in its first rate run (sweep seed 1000, 128 requests at 0.5x
the peak, ~47 req/s): every hop 40-85 ms at p99, TTFT p99 172-225 ms; the second run (seed 1001) did not, nor did
Qwen3 (ids only: no detokenizer text). SmolLM2 with dummy weights emits one token per request, repeated
(`dummy_tokens.json`: each request's first tokens, from `LLM.generate` on this CPU, float32; the H200 runs bf16).
Request 28 of seed 1000 repeats token 10, a special token that the decode skips: 812 tokens that never make text.

This replays that run's token stream through the real detokenizer code, in one process, as a discrete-event model:
the scheduler hands out one step every `--step-ms` (the H200's median decode step at that rate, ~1.5 ms), each
request one token a step from its arrival (`arrival_times`, the bench's seed) for its output length (each request
its last token repeated after its first ones); the detokenizer takes everything waiting when it wakes
(`receive_all`) and its work on it is timed for real (`detokenize_wake`: batch decode, let_go). Each step's wait
(from its hand-out to the end of the wake that sent its text on) is printed for session 25's `let_go` (every cut
back to the last text sent), for session 26's (at most 4 cuts), for today's (special tokens never join a window:
`tokenizer.skipped_ids`), and with request 28 made ordinary.

    python benchmarks/issue18/cpu-s27/seed1000_replay.py [--step-ms 1.5] [--rate 46.98]
"""
import argparse
import json
import os
import statistics
import time

from transformers import AutoTokenizer

from minisgl_edu.bench_serve import arrival_times, random_requests
from minisgl_edu.messages import DetokenizeMsg, TokenColumns
from minisgl_edu.server import tokenizer as d

HERE = os.path.dirname(os.path.abspath(__file__))


def old_let_go(state, sent, window, decode):
    """Session 25's let_go (as `tests/test_server.py` keeps it): every cut back to the last text sent."""
    for cut in range(len(state.ids) - (d.HOLD_LIMIT - 1), state.read_offset, -1):
        head = decode(state.ids[state.prefix_offset:cut])
        if len(head) > len(sent) and window.startswith(head):
            state.prefix_offset, state.read_offset = state.read_offset, cut
            return head[len(sent):]
    return ""


def steps_of(tokens: list[list[int]], outs: list[int], arrivals: list[float], step_s: float) -> list[tuple]:
    """(hand-out time, messages) per scheduler step: TokenColumns for plain tokens, a DetokenizeMsg for a last one."""
    first_step = [int(a / step_s) + 1 for a in arrivals]
    n_steps = max(f + o for f, o in zip(first_step, outs))
    steps = []
    for k in range(n_steps):
        uids, toks, last = [], [], []
        for i, (f, o) in enumerate(zip(first_step, outs)):
            j = k - f
            if 0 <= j < o:
                t = tokens[i][j] if j < len(tokens[i]) else tokens[i][-1]  # its last token repeated
                if j < o - 1:
                    uids.append(i)
                    toks.append(t)
                else:
                    last.append(DetokenizeMsg(i, t, True, "length"))
        if uids or last:
            steps.append((k * step_s, [TokenColumns(uids, toks)] + last))
    return steps


def replay(tok, steps: list[tuple]) -> list[float]:
    """Each step's wait in the modelled detokenizer (seconds): one process, a wake takes all that has arrived."""
    states, waits, free_at, i = {}, [], 0.0, 0
    while i < len(steps):
        now = max(free_at, steps[i][0])
        batch = []
        while i < len(steps) and steps[i][0] <= now:
            batch.append(steps[i])
            i += 1
        t = time.perf_counter()
        d.detokenize_wake(tok, states, [m for _, msgs in batch for m in msgs], False)
        free_at = now + time.perf_counter() - t
        waits += [free_at - at for at, _ in batch]
    return waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-ms", type=float, default=1.5)
    ap.add_argument("--rate", type=float, default=46.98)
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(os.path.join(HERE, "..", "..", "configs", "smollm2-135m"))
    data = json.load(open(os.path.join(HERE, "dummy_tokens.json")))[str(args.seed)]
    outs = [r.output_len for r in random_requests(128, args.seed)]
    arrivals = arrival_times(128, args.rate, args.seed)
    special = [i for i, t in enumerate(data) if tok.decode(t[-1:], skip_special_tokens=True) == ""]  # no text ever
    print(f"seed {args.seed}: requests repeating a special token: "
          f"{[(i, data[i][-1], outs[i], round(arrivals[i], 3)) for i in special]} (request, token, length, arrival s)")
    ordinary = [t if i not in special else t[:-1] + [tok.encode(' the')[0]] for i, t in enumerate(data)]
    new = d.let_go
    try:
        for name, fn, skip, toks in (("session 25 let_go", old_let_go, False, data),
                                     ("session 26: 4 cuts", new, False, data),
                                     ("today: specials out", new, True, data),
                                     ("today, no special run", new, True, ordinary),
                                     ("session 25, no special run", old_let_go, False, ordinary)):
            d.let_go, d.SKIP_SPECIAL = fn, skip
            waits = sorted(replay(tok, steps_of(toks, outs, arrivals, args.step_ms * 1e-3)))
            print(f"{name:<28} {len(waits)} steps: wait median {statistics.median(waits) * 1e3:6.3f} ms, "
                  f"p99 {waits[int(0.99 * len(waits))] * 1e3:7.2f} ms, max {waits[-1] * 1e3:7.2f} ms, "
                  f"steps over 20 ms {sum(w > 0.02 for w in waits)}", flush=True)
    finally:
        d.let_go, d.SKIP_SPECIAL = new, True

if __name__ == "__main__":
    main()

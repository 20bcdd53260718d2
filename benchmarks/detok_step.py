"""CPU cost of the detokenizer process per output token (chapter 9), on a realistic stream.

    python benchmarks/detok_step.py                 # the paths side by side, microseconds per token
    python benchmarks/detok_step.py --profile       # plus cProfile of each path (top functions)
    python benchmarks/detok_step.py --no-text       # as --skip-tokenizer-init (ids in, ids out)

The workload: B = 256 live requests, `steps` scheduler steps of one token each (ids drawn from real text
with CJK and emoji, and uniformly from the vocabulary), requests finishing at random lengths and new ones
taking their place. Each step is what the scheduler sends (`token_replies` -> one encoded
BatchTokenizerMsg); the detokenizer takes `per_wake` steps per wake-up (a backlog, as when it is the
slowest process) and its work is timed from the bytes in to the bytes out (decode, text, encode):
  naive    : --naive-stream: one DetokenizeMsg in, one UserReply out per token (`detokenize_next`)
  expanded : TokenColumns expanded into DetokenizeMsgs, `detokenize_step`, folded into ReplyColumns
  columns  : TokenColumns straight to ReplyColumns (`detokenize_wake`), the rare tokens as messages
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import statistics
import time

TEXT = ("Tokyo is 東京 (日本語), 🙂🚀 — déjà vu, naïve café. 北京欢迎你！ The quick brown fox jumps over the "
        "lazy dog; then it rests in the shade of a tree. Ünïcödé ✨ 한국어 텍스트. ")


def workload(tok, batch: int = 256, steps: int = 300, seed: int = 0) -> list[list]:
    """`steps` lists of TokenOutputs for `batch` live requests (some finishing each step, replaced by new ones)."""
    from minisgl_edu.scheduler import TokenOutput
    rng = random.Random(seed)
    pool = tok.encode(TEXT * 4)
    live = {uid: rng.randint(32, 512) for uid in range(batch)}  # uid -> tokens left
    next_uid, out = batch, []
    for _ in range(steps):
        step = []
        for uid in list(live):
            t = rng.choice(pool) if rng.random() < 0.7 else rng.randrange(tok.vocab_size)
            live[uid] -= 1
            fin = live[uid] == 0
            step.append(TokenOutput(uid, t, fin, "length" if fin else None, None, 100, clamped=uid % 97 == 0))
            if fin:
                del live[uid]
                live[next_uid] = rng.randint(32, 512)
                next_uid += 1
        out.append(step)
    return out


def wire(steps: list[list], columns: bool, per_wake: int) -> list[list[bytes]]:
    """What the scheduler sends, grouped into the detokenizer's wake-ups."""
    from minisgl_edu.messages import BatchTokenizerMsg, encode
    from minisgl_edu.server.scheduler_proc import token_replies
    raws = [encode(BatchTokenizerMsg(token_replies(outs, columns))) for outs in steps]
    return [raws[i:i + per_wake] for i in range(0, len(raws), per_wake)]


def path_naive(tok, states, raws):
    from minisgl_edu.messages import BatchFrontendMsg, DetokenizeMsg, decode, encode, unbatch_rows
    from minisgl_edu.server.tokenizer import detokenize_step
    msgs = [m for raw in raws for m in unbatch_rows(decode(raw))]
    replies = detokenize_step(tok, states, [m for m in msgs if isinstance(m, DetokenizeMsg)], True)
    return encode(BatchFrontendMsg(replies))


def path_expanded(tok, states, raws):
    """The detokenizer before columns went through it: every token a DetokenizeMsg and a UserReply."""
    from minisgl_edu.messages import BatchFrontendMsg, DetokenizeMsg, decode, encode, reply_columns, unbatch_rows
    from minisgl_edu.server.tokenizer import detokenize_step
    msgs = [m for raw in raws for m in unbatch_rows(decode(raw))]
    replies = detokenize_step(tok, states, [m for m in msgs if isinstance(m, DetokenizeMsg)], False)
    return encode(BatchFrontendMsg(reply_columns(replies)))


def path_columns(tok, states, raws):
    from minisgl_edu.messages import BatchFrontendMsg, decode, encode, unbatch
    from minisgl_edu.server.tokenizer import detokenize_wake
    return encode(BatchFrontendMsg(detokenize_wake(tok, states, [m for raw in raws for m in unbatch(decode(raw))],
                                                   False)))


def texts_of(outputs: list[bytes]) -> dict[int, tuple[str, list[int]]]:
    """Each request's text (and token ids, --skip-tokenizer-init) as the API would assemble them."""
    from minisgl_edu.messages import UserReply, decode, unbatch_rows
    text: dict[int, tuple[str, list[int]]] = {}
    for raw in outputs:
        for r in unbatch_rows(decode(raw)):
            if isinstance(r, UserReply):
                t, ids = text.get(r.uid, ("", []))
                text[r.uid] = (t + r.incremental_output, ids + (r.output_ids or []))
    return text


def run(tok, fn, wakes) -> tuple[float, float, list[bytes]]:
    """Wall seconds, CPU seconds (every thread of this process: the Rust tokenizer's pool too), the outputs."""
    states: dict = {}
    t, c = time.perf_counter(), time.process_time()
    outs = [fn(tok, states, raws) for raws in wakes]
    return time.perf_counter() - t, time.process_time() - c, outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--per-wake", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-text", action="store_true", help="as --skip-tokenizer-init: token ids in, token ids out")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    import minisgl_edu.server.tokenizer as T
    from minisgl_edu.default_model import default_model_path
    tok = AutoTokenizer.from_pretrained(default_model_path())
    steps = workload(tok, args.batch, args.steps)
    tok = None if args.no_text else tok
    n = sum(len(s) for s in steps)
    paths = {"naive": (path_naive, wire(steps, False, args.per_wake)),
             "expanded": (path_expanded, wire(steps, True, args.per_wake))}
    if hasattr(T, "detokenize_wake"):
        paths["columns"] = (path_columns, wire(steps, True, args.per_wake))
    runs = [(name, par) for name in paths for par in ("false", "true")]  # TOKENIZERS_PARALLELISM: rayon or not
    times: dict[tuple, list[tuple[float, float]]] = {k: [] for k in runs}
    texts = {}
    for _ in range(args.repeats):  # interleaved: the machine's load moves all paths alike
        for name, par in runs:
            os.environ["TOKENIZERS_PARALLELISM"] = par  # the Rust side reads it at every batch call
            dt, cpu, outs = run(tok, paths[name][0], paths[name][1])
            times[name, par].append((dt, cpu))
            texts[name] = texts_of(outs)
    assert all(t == texts["naive"] for t in texts.values()), "the paths disagree on some request's text"
    print(f"{n} tokens, B={args.batch}, {args.steps} steps, {args.per_wake} steps per wake-up, {os.cpu_count()} "
          f"cores{', no text (--skip-tokenizer-init)' if args.no_text else ''}; "
          f"us per token, median (range) over {args.repeats}:")
    for (name, par), ts in times.items():
        wall, cpu = ([1e6 * t[i] / n for t in ts] for i in (0, 1))
        print(f"  {name:9s} parallel={par:5s}  wall {statistics.median(wall):6.2f} ({min(wall):.2f}-{max(wall):.2f})"
              f"  cpu {statistics.median(cpu):6.2f} ({min(cpu):.2f}-{max(cpu):.2f})")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if args.profile:
        for name, (fn, wakes) in paths.items():
            prof = cProfile.Profile()
            prof.enable()
            run(tok, fn, wakes)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
            print(f"---- {name} ----\n" + "\n".join(s.getvalue().splitlines()[6:26]))


if __name__ == "__main__":
    main()

"""Issue 18, session 28: does any token of the vocabulary, repeated, make the detokenizer's work grow with the run?

Session 27 found one such token (a special token the decode skips, repeated for 812 tokens by a model with dummy
weights) and took the skipped tokens out of the windows. This sweep asks the same of every id: each one repeated
RUN times through `detokenize_columns`, a token a step as the detokenizer's loop gets them, counting the ids its
decodes cover over the last LAST tokens. Bounded work is a few ids a token (two windows of a token or two, plus
the rare let_go); a window that grows reads about the run's length a token. `--twin` runs SKIP_SPECIAL = False,
which this sweep must flag (the 17 special tokens).

    python benchmarks/issue18/cpu-s28/vocab_runs.py [--twin] [--run 48] [--pairs 20000]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

from transformers import AutoTokenizer

from minisgl_edu.messages import TokenColumns
from minisgl_edu.server import tokenizer as detok


def ids_decoded_late(tok, real, ids: list[int], last: int) -> int:
    """One stream of `ids` through detokenize_columns; the ids decoded for its last `last` tokens."""
    decoded = [0]

    def counting(seqs):
        decoded[0] += sum(map(len, seqs))
        return real(seqs)
    states: dict = {}
    for i, t in enumerate(ids):
        if i == len(ids) - last:
            decoded[0] = 0
        detok.detokenize_columns(tok, states, TokenColumns([0], [t]), counting)
    return decoded[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="benchmarks/configs/smollm2-135m")
    ap.add_argument("--run", type=int, default=48, help="tokens a stream")
    ap.add_argument("--last", type=int, default=16, help="tokens whose decoded ids are counted, at the run's end")
    ap.add_argument("--limit", type=float, default=12.0, help="ids a token above which a stream is flagged")
    ap.add_argument("--pairs", type=int, default=20000, help="random two-token cycles (A B A B ...) tried too")
    ap.add_argument("--twin", action="store_true", help="SKIP_SPECIAL = False: special tokens stay in the windows")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    detok.SKIP_SPECIAL = not args.twin
    tok = AutoTokenizer.from_pretrained(args.model)
    real = detok.batch_decoder(tok)
    vocab = len(tok)
    t0, flagged, per_token = time.perf_counter(), [], []
    streams = [("repeat", [i]) for i in range(vocab)]
    rng = random.Random(0)
    streams += [("pair", [rng.randrange(vocab), rng.randrange(vocab)]) for _ in range(args.pairs)]
    for k, (kind, cycle) in enumerate(streams):
        ids = (cycle * args.run)[:args.run]
        n = ids_decoded_late(tok, real, ids, args.last) / args.last
        per_token.append(n)
        if n > args.limit:
            flagged.append({"kind": kind, "ids": cycle, "ids_a_token": n, "text": tok.decode(cycle)})
        if k % 5000 == 0:
            print(f"  {k:>6} / {len(streams)} streams, {time.perf_counter() - t0:.0f} s, {len(flagged)} flagged",
                  file=sys.stderr, flush=True)
    per_token.sort()
    q = lambda p: per_token[min(len(per_token) - 1, int(p * len(per_token)))]  # noqa: E731
    print(f"{'twin (special tokens in the windows)' if args.twin else 'this code'}: {vocab} ids repeated and "
          f"{args.pairs} random pairs, {args.run} tokens a stream, ids decoded a token over the last {args.last}: "
          f"median {q(0.5):.1f}, p99 {q(0.99):.1f}, max {per_token[-1]:.1f}; over {args.limit:g}: {len(flagged)} "
          f"({time.perf_counter() - t0:.0f} s)")
    for f in flagged[:40]:
        print(f"  {f['kind']} {f['ids']}: {f['ids_a_token']:.1f} ids a token, text {f['text']!r}")
    if args.json:
        json.dump({"twin": args.twin, "run": args.run, "last": args.last, "vocab": vocab, "pairs": args.pairs,
                   "median": q(0.5), "p99": q(0.99), "max": per_token[-1], "flagged": flagged}, open(args.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()

"""Session 27: one stream of N special tokens (which the decode skips) through the detokenizer's columns path a token
at a time (`detokenize_columns`, as the server runs it), with special tokens in the windows (session 26: at most 4
let_go cuts, `SKIP_SPECIAL = False`) and out of them (today), ABBA in one process, SmolLM2's tokenizer.

    python benchmarks/issue18/cpu-s27/special_run_ab.py [--n 400 4000]
"""
import argparse
import os
import time

from transformers import AutoTokenizer

from minisgl_edu.messages import TokenColumns
from minisgl_edu.server import tokenizer as d

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[400, 4000])
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(os.path.join(HERE, "..", "..", "configs", "smollm2-135m"))
    special = sorted(d.skipped_ids(tok))[10]
    for n in args.n:
        for name, skip in (("in the windows", False), ("out of them", True), ("out of them", True),
                           ("in the windows", False)):
            d.SKIP_SPECIAL = skip
            states, last = {}, 0.0
            t = time.perf_counter()
            for _ in range(n):
                t1 = time.perf_counter()
                d.detokenize_columns(tok, states, TokenColumns([1], [special]))
                last = time.perf_counter() - t1
            print(f"{n} special tokens, {name:<15}: {(time.perf_counter() - t) * 1e3:8.1f} ms in all, last token "
                  f"{last * 1e3:.3f} ms", flush=True)
    d.SKIP_SPECIAL = True


if __name__ == "__main__":
    main()

"""Session 26: one stream of 400 special tokens (which the decode skips) through the detokenizer a token at a time,
session 25's let_go (every cut back to the last text sent) beside today's (at most 4 cuts), ABBA in one process.

    python benchmarks/issue18/cpu-s26/letgo_ab.py
"""
import time

from transformers import AutoTokenizer

from minisgl_edu.default_model import default_model_path
from minisgl_edu.server import tokenizer as d


def old_let_go(state, sent, window, decode):
    for cut in range(len(state.ids) - (d.HOLD_LIMIT - 1), state.read_offset, -1):
        head = decode(state.ids[state.prefix_offset:cut])
        if len(head) > len(sent) and window.startswith(head):
            state.prefix_offset, state.read_offset = state.read_offset, cut
            return head[len(sent):]
    return ""


def main() -> None:
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    dec, new_let_go = d.batch_decoder(tok), d.let_go
    special = tok.all_special_ids[0]
    for name, fn in (("session 25 let_go", old_let_go), ("4 cuts", new_let_go), ("4 cuts", new_let_go),
                     ("session 25 let_go", old_let_go)):
        d.let_go = fn
        s, last = d.DecodeState(), 0.0
        t = time.perf_counter()
        for tid in [special] * 400:
            t1 = time.perf_counter()
            d.detokenize_batch(tok, [s], [tid], [False], dec)
            last = time.perf_counter() - t1
        print(f"{name:<18} 400 special tokens: {(time.perf_counter() - t) * 1e3:.1f} ms in all, "
              f"last token {last * 1e3:.3f} ms", flush=True)
    d.let_go = new_let_go


if __name__ == "__main__":
    main()

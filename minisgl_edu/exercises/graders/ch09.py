"""Chapter 9: incremental detokenization — random multi-byte texts one token at a time, then the server's
real detokenizer loop (server/tokenizer.py) with your function in it."""
from __future__ import annotations

import functools

from hypothesis import strategies as st

from .. import Wrong
from ..swap import swapped
from . import call, prop

ALPHABET = ["a", "b", " ", "\n", "é", "ß", "日", "本", "語", "🙂", "👍🏽", "x"]


@functools.lru_cache(maxsize=1)
def tokenizer():
    from transformers import AutoTokenizer

    from ...default_model import default_model_path
    return AutoTokenizer.from_pretrained(default_model_path())


def grade_detokenize_next(ex, path, module) -> None:
    from ...server.tokenizer import DecodeState
    tok = tokenizer()

    def check(parts):
        text = "".join(parts)
        ids = tok.encode(text)
        full = tok.decode(ids, skip_special_tokens=True)
        state, pieces = DecodeState(), []
        for i, t in enumerate(ids):
            piece = call("detokenize_next", module.detokenize_next, tok, state, t, i == len(ids) - 1,
                         on=f"token {i} of {text!r} (ids {ids})")
            if not isinstance(piece, str):
                raise Wrong(f"on {text!r}, your detokenize_next returned {piece!r} for token {i}; it returns a str")
            pieces.append(piece)
            so_far = tok.decode(ids[: i + 1], skip_special_tokens=True)
            if "\ufffd" in piece and "\ufffd" not in full:
                raise Wrong(f"on {text!r} (ids {ids}), token {i} sent {piece!r}: half a character (U+FFFD) went out; "
                            f"hold back a tail that does not decode yet")
            if not full.startswith("".join(pieces)):
                raise Wrong(f"on {text!r} (ids {ids}), after token {i} you had sent {''.join(pieces)!r}, which is not "
                            f"how the text {full!r} begins: some text was sent twice or out of order")
            if "\ufffd" not in so_far and full.startswith(so_far) and "".join(pieces) != so_far:
                raise Wrong(f"on {text!r} (ids {ids}), after token {i} you had sent {''.join(pieces)!r}, but "
                            f"{so_far!r} is complete: send text as soon as it decodes")
        if "".join(pieces) != full:
            raise Wrong(f"on {text!r} (ids {ids}), your pieces {pieces} join to {''.join(pieces)!r}, not {full!r}")

    prop(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=8), check, 80,
         explicit=(["日", "本", " ", "🙂"], ["a", "👍🏽", "b"]))
    _server_loop(ex, path, tok)


def _server_loop(ex, path, tok) -> None:
    """The detokenizer process's loop, in this process: two interleaved requests, then ExitMsg."""
    from types import SimpleNamespace

    from ...config import ServerConfig
    from ...default_model import default_model_path
    from ...messages import BatchTokenizerMsg, DetokenizeMsg, ExitMsg, encode, unbatch_rows
    from ...server.tokenizer import detokenize_loop
    texts = {1: "日本語 🙂 ok", 2: "ßé👍🏽!"}
    ids = {u: tok.encode(t) for u, t in texts.items()}
    steps = max(map(len, ids.values()))
    raws = [encode(BatchTokenizerMsg([DetokenizeMsg(u, ids[u][k], k == len(ids[u]) - 1, "stop" if k == len(ids[u]) - 1
                                                    else None) for u in ids if k < len(ids[u])])) for k in range(steps)]
    raws.append(encode(ExitMsg()))
    inbox = SimpleNamespace(get_raw=lambda *a: raws.pop(0), drain_raw=lambda: [])
    replies = []
    frontend = SimpleNamespace(put=lambda m: replies.extend(unbatch_rows(m)))  # as the API expands ReplyColumns
    with swapped([ex], lambda e: path):
        detokenize_loop(tok, inbox, frontend, ServerConfig(model_path=default_model_path()))  # the defaults: no hop log
    for u, t in texts.items():
        got = "".join(r.incremental_output for r in replies if r.uid == u)
        want = tok.decode(ids[u], skip_special_tokens=True)
        if got != want:
            raise Wrong(f"the server's detokenizer loop with your detokenize_next streamed {got!r} for {t!r}, not {want!r}")

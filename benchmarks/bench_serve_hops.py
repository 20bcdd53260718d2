"""CPU cost of one token on its way back to the client, hop by hop (chapter 9), for a step of B requests.

    python benchmarks/bench_serve_hops.py                       # this checkout
    PYTHONPATH=/path/to/old/checkout python benchmarks/bench_serve_hops.py   # the same on older code

Each process of the reply path does, per scheduler step of B requests:
  scheduler   : B DetokenizeMsgs -> one encoded BatchTokenizerMsg
  detokenizer : decode it, turn B tokens into text, encode B UserReplies
  API server  : decode them, one SSE event (a JSON chunk) per reply
The figures are microseconds per token (per request per step), the median of several timings.
The library's own functions are used where they exist (`detokenize_step` is newer than the per-token
`detokenize_next`), so the same script times the old and the new code.
"""
from __future__ import annotations

import json
import statistics
import sys
import time


def timed(fn, reps: int = 15) -> float:
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main(batch_sizes=(16, 256)) -> dict:
    from transformers import AutoTokenizer

    import minisgl_edu.server.tokenizer as T
    from minisgl_edu.default_model import default_model_path
    from minisgl_edu.messages import BatchFrontendMsg, BatchTokenizerMsg, DetokenizeMsg, decode, encode
    tok = AutoTokenizer.from_pretrained(default_model_path())
    text = "The quick brown fox jumps over the lazy dog, and then it rests in the shade of a tree. " * 8
    ids = tok.encode(text)
    res = {}
    for B in batch_sizes:
        msgs = [DetokenizeMsg(i, ids[40 + i % 50], False, None, 300) for i in range(B)]
        raw = encode(BatchTokenizerMsg(msgs))

        def states():
            # as in a running stream: the window starts one emission back (a token or two before the unsent end)
            return {i: T.DecodeState(ids=list(ids[:40 + i % 50]), prefix_offset=38 + i % 50, read_offset=40 + i % 50)
                    for i in range(B)}

        def detok_old():
            st = states()
            return [T.detokenize_next(tok, st[m.uid], m.next_token) for m in decode(raw).data]

        def detok_new():
            return T.detokenize_step(tok, states(), decode(raw).data, naive=False)
        replies = detok_new() if hasattr(T, "detokenize_step") else None
        if replies is None:
            from minisgl_edu.messages import UserReply
            replies = [UserReply(m.uid, t, False, None, 300, 10) for m, t in zip(msgs, detok_old())]
        raw_replies = encode(BatchFrontendMsg(replies))
        meta = {"id": "cmpl-1", "created": 0, "model": "m"}

        def api():
            for r in decode(raw_replies).data:
                json.dumps({**meta, "object": "text_completion", "choices": [
                    {"index": 0, "text": r.incremental_output, "finish_reason": None, "logprobs": None}]})
        row = {"scheduler_encode": timed(lambda: encode(BatchTokenizerMsg(msgs))),
               "detokenizer": timed(detok_new if hasattr(T, "detokenize_step") else detok_old)
               + timed(lambda: encode(BatchFrontendMsg(replies))),
               "api_decode_and_json": timed(api)}
        res[B] = {k: 1e6 * v / B for k, v in row.items()}  # microseconds per token
        res[B]["total"] = sum(res[B].values())
        print(f"B={B:4d}: " + "  ".join(f"{k} {v:6.1f} us" for k, v in res[B].items()), flush=True)
    return res


if __name__ == "__main__":
    out = main()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f)

"""Chapter 6: a request that really stops on EOS rides along one extra step in the overlap loop.

    python3 scripts/eos_ride_along.py [--device cpu|cuda]

Two requests on the default model with overlap on: request 0 is a chat question the model answers
and ends with its EOS token; request 1 ignores EOS and keeps the loop going. Each call of `step()`
prints the results it returned, who is in the step still in flight, and `deferred_rows`. The call
that returns request 0's EOS token has already launched a step that includes request 0: that step's
token for it is dropped, and its row waits in `deferred_rows` until that step is done. On the CPU the
loop's logic is the same as on a GPU (the forward just runs inside launch); only the timing differs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minisgl_edu import LLM, SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    llm = LLM(device=args.device, overlap=True, max_total_tokens=1024)
    sched, tok = llm.scheduler, llm.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, tokenize=False)
    chat = tok(text, add_special_tokens=False)["input_ids"]
    a = sched.add_request(0, chat, SamplingParams(max_tokens=64))  # stops on EOS
    sched.add_request(1, tok("Count: one, two, three,")["input_ids"], SamplingParams(max_tokens=20, ignore_eos=True))
    for call in range(1, 40):
        out = sched.step()
        flying = sched.in_flight[0] if sched.in_flight else None
        mine = [(o.uid, o.token_id == -1 or o.token_id in sched.eos, o.finish_reason) for o in out if o.uid == 0]
        print(f"call {call:2d}: request 0 results {mine!s:<22} in flight: "
              f"{[r.uid for r in flying.reqs] if flying else '-'!s:<8} deferred rows: {sched.deferred_rows}")
        if a.finish_reason and not sched.deferred_rows and 0 not in [r.uid for r in (flying.reqs if flying else [])]:
            break
    print("request 0:", a.finish_reason, "after", len(a.token_ids) - a.prompt_len, "tokens:",
          repr(tok.decode(a.token_ids[a.prompt_len:])))
    while not sched.idle:
        sched.step()
    sched.check_integrity()
    print("integrity ok")


if __name__ == "__main__":
    main()

"""Session 27: the first tokens SmolLM2-135M with dummy weights emits for each prompt of `bench compare`'s first two
rate runs (sweep seeds 1000 and 1001, 128 prompts each), on this CPU: dummy_tokens.json, which seed1000_replay.py reads.
Each request repeats one token; request 28 of seed 1000 repeats special token 10 (`<issue_closed>`), in float32 and,
checked on its own, in bfloat16 (`--dtype bfloat16 --only 28`).

    python benchmarks/issue18/cpu-s27/dummy_tokens.py [--tokens 6] [--dtype float32] [--only 28]   (~7 min: both seeds)
"""
import argparse
import json
import os

import torch

from minisgl_edu.bench_serve import random_requests
from minisgl_edu.llm import LLM
from minisgl_edu.req import SamplingParams

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--only", type=int, default=None, help="one request of seed 1000, printed, nothing written")
    args = ap.parse_args()
    llm = LLM(os.path.join(HERE, "..", "..", "configs", "smollm2-135m"), device="cpu", dummy_weights=True,
              dtype=getattr(torch, args.dtype), max_total_tokens=200_000)
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True, temperature=0)
    if args.only is not None:
        out, = llm.generate([random_requests(128, 1000)[args.only].prompt], params, use_tqdm=False)
        print(args.only, args.dtype, out["token_ids"])
        return
    data = {}
    for seed in (1000, 1001):
        outs = llm.generate([r.prompt for r in random_requests(128, seed)], params)
        data[str(seed)] = [o["token_ids"] for o in outs]
    json.dump(data, open(os.path.join(HERE, "dummy_tokens.json"), "w"))


if __name__ == "__main__":
    main()

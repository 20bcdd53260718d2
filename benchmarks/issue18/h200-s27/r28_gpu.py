"""Session 27: what SmolLM2 with dummy weights emits on the GPU (bf16) for `bench compare`'s first rate run (sweep seed
1000), every request to its full length as the bench asks (ignore_eos): per request the tokens the detokenizer's decode
skips (special ones), the longest run of them, and request 28 (on the CPU: special token 10 for all 812 tokens).
The H200 runs stalled tens of ms where a replay of the CPU's tokens stalls seconds: this tells what the GPU emitted.

    python benchmarks/issue18/h200-s27/r28_gpu.py [--seed 1000] [--max-tokens 4]
"""
import argparse
import json
import os

from minisgl_edu.bench_serve import random_requests
from minisgl_edu.llm import LLM
from minisgl_edu.req import SamplingParams
from minisgl_edu.server.tokenizer import skipped_ids


def longest_run(ids: list[int], skip: frozenset) -> int:
    best = cur = 0
    for t in ids:
        cur = cur + 1 if t in skip else 0
        best = max(best, cur)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=None, help="a cap (a dry run on the CPU): default each its own")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    llm = LLM(os.path.join(here, "..", "..", "configs", "smollm2-135m"), dummy_weights=True)
    skip = skipped_ids(llm.tokenizer)
    reqs = random_requests(128, args.seed)
    cap = args.max_tokens or 1 << 20
    outs = llm.generate([r.prompt for r in reqs], [SamplingParams(max_tokens=min(r.output_len, cap), ignore_eos=True,
                                                                  temperature=0) for r in reqs], use_tqdm=False)
    rows = []
    for i, o in enumerate(outs):
        ids = o["token_ids"]
        n_skip = sum(t in skip for t in ids)
        if n_skip:
            rows.append(dict(request=i, tokens=len(ids), skipped=n_skip, longest_run=longest_run(ids, skip),
                             distinct=sorted(set(ids))[:10], first=ids[:12]))
    print(f"seed {args.seed}: {len(rows)} of 128 requests emit tokens the decode skips", flush=True)
    for r in rows:
        print(" ", r, flush=True)
    print("request 28:", outs[28]["token_ids"][:24], "... distinct", sorted(set(outs[28]["token_ids"]))[:20])
    json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), f"skipped_seed{args.seed}.json"), "w"))


if __name__ == "__main__":
    main()

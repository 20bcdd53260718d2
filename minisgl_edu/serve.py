"""Chapter 9 — the full server (for now: the offline API on a demo prompt)."""
from __future__ import annotations

import argparse

from . import SamplingParams
from .llm import LLM


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m minisgl_edu.serve")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--prompt", default="What is the capital of France?")
    args = ap.parse_args(argv)
    llm = LLM(args.model, device=args.device)
    out = llm.generate([args.prompt], SamplingParams(max_tokens=64), chat=True, use_tqdm=False)
    print(out[0]["text"])


if __name__ == "__main__":
    main()

"""Issue 18: what a mixed step costs on the GPU, by prompt length, next to the decode step it replaces.

    python benchmarks/mixed_cost.py [--model DIR] [--decode-bs 16,32,64] [--lens 16,64,128,253,509,765,1021]

The served ITL tail is the mixed steps (benchmarks/issue18/h200-s11/tail.py): a decode row in a mixed step waits for
the prompt's work too. For each number of decoding requests (prompts of ~`--ctx` tokens), this times the decode step
alone and then one mixed step per prompt length, each as pure device time: a 5 ms sleep kernel is queued on the
engine stream first, so the whole step is launched before its first kernel runs and the forward's span (its two
Timeline events) holds no host time. Prints the mixed step over the decode step: the ITL ratio those tokens see.
"""
from __future__ import annotations

import argparse
import json
import itertools
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import fresh_scheduler  # noqa: E402
from minisgl_edu.trace import Timeline  # noqa: E402

UIDS = itertools.count(2_000_000)


def device_step(sched) -> tuple[float, str, int]:
    """(device ms, phase, prompt tokens) of the scheduler's next step, launched behind a sleep kernel."""
    eng = sched.engine
    batch = sched.schedule()
    prompt = sum(r.extend_len for r in batch.reqs[batch.decode_rows:]) if batch.is_prefill else 0
    eng.timeline = Timeline(eng.device)
    if eng.stream is not None:  # (on the CPU, a dry run of the script: host times)
        with torch.cuda.stream(eng.stream):
            torch.cuda._sleep(10_000_000)  # ~5 ms: longer than any launch here
    tokens = sched.launch(batch)
    sched.process(batch, tokens.tolist())
    st = eng.timeline.steps()[0]
    eng.timeline = None
    return 1e3 * (st.device_end - st.device_start), sched.stats[-1].phase, prompt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "benchmarks/configs/qwen3-0.6b"))
    ap.add_argument("--decode-bs", default="16,32,64")
    ap.add_argument("--lens", default="16,64,128,253,381,509,765,1021")
    ap.add_argument("--ctx", type=int, default=800)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--llm-kwargs", default="", help="k=v,... extra LLM keywords (ints parsed)")
    args = ap.parse_args()
    kw = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in
          (item.split("=") for item in filter(None, args.llm_kwargs.split(",")))}
    llm = LLM(args.model, device=args.device, dummy_weights=True, **kw)
    sched = fresh_scheduler(llm, overlap=False)
    vocab = min(llm.engine.vocab_size, 10000)
    g = torch.Generator().manual_seed(0)
    prompt = lambda n: torch.randint(0, vocab, (n,), generator=g).tolist()  # noqa: E731
    lens = [int(x) for x in args.lens.split(",")]
    print(f"{args.model} {kw}: device ms of one step (median of {args.reps}), decode rows at context ~{args.ctx}")
    table = {"model": args.model, "ctx": args.ctx, "lens": lens, "rows": []}
    print(f"{'decode bs':>9} {'decode':>8} " + " ".join(f"{'+' + str(n):>7}" for n in lens) + "   (mixed / decode below)")
    for bs in (int(x) for x in args.decode_bs.split(",")):
        for _ in range(bs):
            sched.add_request(next(UIDS), prompt(args.ctx), SamplingParams(max_tokens=400, ignore_eos=True))
        while sched.pending:
            device_step(sched)
        dec = statistics.median(device_step(sched)[0] for _ in range(args.reps + 2))
        row = []
        for n in lens:
            times = []
            for _ in range(args.reps):
                sched.add_request(next(UIDS), prompt(n), SamplingParams(max_tokens=1, ignore_eos=True))
                ms, phase, tok = device_step(sched)
                assert phase == "mixed" and n - 8 <= tok <= n, (phase, tok)  # the whole prompt (less a chance prefix hit)
                times.append(ms)
                device_step(sched)  # a decode step between (the prompt's request has finished)
            row.append(statistics.median(times))
        table["rows"].append({"decode_bs": bs, "decode_ms": dec, "mixed_ms": row})
        print(f"{bs:>9} {dec:>8.3f} " + " ".join(f"{t:>7.3f}" for t in row))
        print(f"{'':>9} {'':>8} " + " ".join(f"{t / dec:>7.2f}" for t in row), flush=True)
        for uid in [r.uid for r in list(sched.running)]:
            sched.abort(uid)
        while not sched.idle:
            device_step(sched)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()

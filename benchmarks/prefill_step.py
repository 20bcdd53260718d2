"""Issue 18: what one prefill step costs, on the host and on the device, next to a decode step.

    python benchmarks/prefill_step.py [--model DIR] [--lens 16,561,2048,16384] [--profile 561] [--device cuda]

For each prompt length, one request alone through the real scheduler (normal loop): the wall time of
`schedule`, of `launch` (the host's share: it returns once the forward is queued) and of the whole step
after a synchronize (the device's share). With `--profile L` a torch.profiler table of that step's host
ops (self CPU time) and its device kernels, beside `--decode-bs` decoding requests (where the host time goes,
phase by phase: benchmarks/launch_phases.py; cProfile misattributed it). With
`--decode-bs B` the same lengths once more, now with B requests decoding beside them (`--mixed-chunk` on: the mixed step; the prefill alone otherwise).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import fresh_scheduler  # noqa: E402

UIDS = itertools.count(1_000_000)


def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed_step(sched, dev) -> tuple[float, float, float, str]:
    """(schedule, launch, whole step) in ms for the scheduler's next batch, and its phase."""
    sync(dev)
    t0 = time.perf_counter()
    batch = sched.schedule()
    t1 = time.perf_counter()
    tokens = sched.launch(batch)
    t2 = time.perf_counter()
    sync(dev)
    t3 = time.perf_counter()
    sched.process(batch, tokens.tolist())
    return 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t0), sched.stats[-1].phase


def prompt(n: int, vocab: int, g: torch.Generator) -> list[int]:
    return torch.randint(0, min(vocab, 10000), (n,), generator=g).tolist()


def run_lengths(llm, lens, reps, decode_bs: int, g) -> None:
    sched, dev = llm.scheduler, llm.engine.device
    vocab = llm.engine.vocab_size
    for n in lens:
        rows = []
        for _ in range(reps):
            for _ in range(decode_bs):  # requests already decoding (prefilled and one token out first)
                sched.add_request(next(UIDS), prompt(600, vocab, g), SamplingParams(max_tokens=8, ignore_eos=True))
            while sched.pending:
                timed_step(sched, dev)
            sched.add_request(next(UIDS), prompt(n, vocab, g), SamplingParams(max_tokens=1, ignore_eos=True))
            rows.append(timed_step(sched, dev))
            while not sched.idle:
                timed_step(sched, dev)
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        print(f"  prompt {n:6d} + {decode_bs:3d} decoding: phase {rows[-1][3]:8s} schedule {med[0]:6.2f} ms  "
              f"launch (host) {med[1]:7.2f} ms  step (synchronized) {med[2]:7.2f} ms", flush=True)


def profile(llm, n: int, g, decode_bs: int = 0) -> None:
    from torch.profiler import ProfilerActivity, profile as prof
    sched, dev = llm.scheduler, llm.engine.device
    for _ in range(decode_bs):  # requests decoding beside it (a mixed step with mixed_chunk on)
        sched.add_request(next(UIDS), prompt(600, llm.engine.vocab_size, g), SamplingParams(max_tokens=64, ignore_eos=True))
    while sched.pending:
        timed_step(sched, dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sched.add_request(next(UIDS), prompt(n, llm.engine.vocab_size, g), SamplingParams(max_tokens=1, ignore_eos=True))
    with prof(activities=acts) as p:
        timed_step(sched, dev)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    if dev.type == "cuda":
        print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "benchmarks/configs/smollm2-135m"))
    ap.add_argument("--device", default=None)
    ap.add_argument("--lens", default="16,561,2048,8000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--decode-bs", type=int, default=0)
    ap.add_argument("--mixed-attention", choices=["split", "serial", "one"], default="split",
                    help="mixed steps: decode and prefill kernels side by side (split, the default), one after the "
                         "other (serial), or one prefill kernel")
    ap.add_argument("--llm-kwargs", default="", help="k=v,... extra LLM keywords (ints and floats parsed)")
    args = ap.parse_args()
    kw = {}
    for item in filter(None, args.llm_kwargs.split(",")):
        k, v = item.split("=")
        kw[k] = int(v) if v.lstrip("-").isdigit() else v
    import minisgl_edu.attention.flashinfer as fi
    fi.SPLIT_MIXED = args.mixed_attention != "one"
    fi.PARALLEL_MIXED = args.mixed_attention == "split"
    llm = LLM(args.model, device=args.device, dummy_weights=True, **kw)
    fresh_scheduler(llm, overlap=False)
    g = torch.Generator().manual_seed(0)
    lens = [int(x) for x in args.lens.split(",")]
    print(f"{args.model} on {llm.engine.device} {kw}: one prefill step by prompt length (median of {args.reps})")
    run_lengths(llm, [16, 561], 2, 0, g)  # warm-up: kernels and graph wrappers
    run_lengths(llm, lens, args.reps, 0, g)
    if args.decode_bs:
        run_lengths(llm, lens[:3], args.reps, args.decode_bs, g)
    if args.profile:
        profile(llm, args.profile, g, args.decode_bs)


if __name__ == "__main__":
    main()

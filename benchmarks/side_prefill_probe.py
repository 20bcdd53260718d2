"""Issue 18: would a prompt's prefill on a second stream, beside the decode steps, keep the ITL tail near one step?

    python benchmarks/side_prefill_probe.py [--model DIR] [--decode-bs 32,64] [--lens 253,509,1021] [--ctx 800]

Today a new prompt rides in a mixed step (chapter 6): every decoding request's next token waits for the prompt's
work too, and those steps make the served ITL tail (RESULTS.md, sessions 11-24: ~1.2-1.8 x a decode step). The
other design runs the prompt's prefill on its own stream while the decode steps go on; the request joins the decode
batch once its first token is out. That pays only if the two share the GPU well: a SmolLM2 decode step fills few
SMs for most of its ~1.4 ms (a latency-bound chain of small kernels). This probe measures it before anything is
built. Two engines in one process (A decodes `bs` requests at context `ctx`; B prefills one prompt of `len`
tokens), each step a CUDA-graph replay as served. Both are queued behind a sleep kernel, so each span is device time:

  decode     A's decode step alone
  prefill    B's prefill alone (its prompt-only graph)
  mixed      today's way: the same prompt in A's mixed step with the bs decode rows (one graph)
  side       A's decode step and B's prefill at once, on two streams: the decode step's span and the prefill's
  side, hi   the same with A's stream at high priority

Prints ms and the ratios that decide it: side-decode / decode (what a decoding request's interval would become while
a prompt prefills beside it) against mixed / decode (what it is today).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu import LLM  # noqa: E402
from minisgl_edu.bench import make_decode_batch, release  # noqa: E402
from minisgl_edu.req import Batch, Req, SamplingParams  # noqa: E402

SLEEP_CYCLES = 20_000_000  # ~10 ms at the H200's clock: longer than launching both steps


def prompt_batch(engine, n: int, seed: int, decode: Batch | None = None) -> Batch:
    """One fresh prompt of n tokens, ready to prefill (its slots assigned); with `decode`, a mixed step: the
    decode batch's requests ride in front as one-token rows (their slots are the decode batch's)."""
    g = torch.Generator().manual_seed(seed)
    pool = engine.pool
    r = Req(90_000 + seed, torch.randint(0, min(10000, engine.vocab_size), (n,), generator=g).tolist(),
            SamplingParams(max_tokens=1))
    r.table_idx, r.device_len = pool.take_row(), n
    pool.token_pool[r.table_idx, :n] = torch.tensor(r.token_ids, dtype=torch.int32)
    if decode is None:
        b = Batch([r], "prefill")
        b.out_loc = pool.assign_locations([r])
        return b
    b = Batch(decode.reqs + [r], "prefill", decode_rows=decode.size)
    b.out_loc = torch.cat([decode.out_loc, pool.assign_locations([r])])
    return b


def drop_prompt(engine, b: Batch) -> None:
    r = b.reqs[-1]
    engine.pool.free_tail(r, 0, in_step=True)
    engine.pool.release_row(r.table_idx)


def spans(steps: list[tuple[object, Batch]], reps: int) -> list[float]:
    """Median device ms of each (engine, batch) step, all queued at once behind one sleep kernel, each on its
    engine's stream: from the sleep's end to that step's end."""
    out: list[list[float]] = [[] for _ in steps]
    for _ in range(reps + 2):
        caller = torch.cuda.current_stream()
        torch.cuda._sleep(SLEEP_CYCLES)
        start = torch.cuda.Event(enable_timing=True)
        start.record(caller)
        ends = []
        for eng, batch in steps:
            eng.forward(batch, wait=False)  # its stream waits for the caller's (the sleep), then runs the step
            ends.append(torch.cuda.Event(enable_timing=True))
            ends[-1].record(eng.stream)
        torch.cuda.synchronize()
        for i, e in enumerate(ends):
            out[i].append(start.elapsed_time(e))
    return [statistics.median(t[2:]) for t in out]


def main() -> None:
    ap = argparse.ArgumentParser()
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--model", default=str(root / "benchmarks/configs/smollm2-135m"))
    ap.add_argument("--decode-bs", default="32,64")
    ap.add_argument("--lens", default="253,509,1021")
    ap.add_argument("--ctx", type=int, default=800)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    common = dict(device="cuda", dummy_weights=True, skip_tokenizer_init=True)
    a = LLM(args.model, max_total_tokens=160_000, max_running_reqs=128, cuda_graph_max_bs=128, **common).engine
    b = LLM(args.model, max_total_tokens=8_192, max_running_reqs=4, cuda_graph_max_bs=1, **common).engine
    lo, hi = torch.cuda.Stream(priority=0), torch.cuda.Stream(priority=-1)
    print(f"{args.model}: device ms, median of {args.reps}; decode rows at context {args.ctx}", flush=True)
    print(f"{'bs':>4} {'len':>5} {'decode':>7} {'prefill':>8} {'mixed':>7} {'side: dec':>10} {'pre':>6} "
          f"{'hi: dec':>8} {'pre':>6} {'mixed/dec':>10} {'side/dec':>9} {'hi/dec':>7}")
    rows = []
    for bs in (int(x) for x in args.decode_bs.split(",")):
        dec = make_decode_batch(a, bs, args.ctx, seed=bs)
        for n in (int(x) for x in args.lens.split(",")):
            pre = prompt_batch(b, n, seed=n)
            mix = prompt_batch(a, n, seed=n, decode=dec)
            a.stream = b.stream = lo
            t_dec, = spans([(a, dec)], args.reps)
            t_pre, = spans([(b, pre)], args.reps)
            t_mix, = spans([(a, mix)], args.reps)
            b.stream = torch.cuda.Stream()  # two streams of one priority
            s_dec, s_pre = spans([(a, dec), (b, pre)], args.reps)
            a.stream = hi  # the decode stream first whenever both have work
            h_dec, h_pre = spans([(a, dec), (b, pre)], args.reps)
            row = dict(bs=bs, len=n, decode=t_dec, prefill=t_pre, mixed=t_mix, side_decode=s_dec, side_prefill=s_pre,
                       hi_decode=h_dec, hi_prefill=h_pre)
            rows.append(row)
            print(f"{bs:>4} {n:>5} {t_dec:>7.3f} {t_pre:>8.3f} {t_mix:>7.3f} {s_dec:>10.3f} {s_pre:>6.3f} "
                  f"{h_dec:>8.3f} {h_pre:>6.3f} {t_mix / t_dec:>10.2f} {s_dec / t_dec:>9.2f} {h_dec / t_dec:>7.2f}",
                  flush=True)
            drop_prompt(b, pre)
            drop_prompt(a, mix)
        release(a, dec)
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "ctx": args.ctx, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

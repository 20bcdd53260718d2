"""Chapter 8 on GPUs: tp=1 vs tp=N with the Qwen3-0.6B architecture, dummy weights, bf16.

    python scripts/gpu_tp.py run --tp N --out DIR      # one process per tp size: the GPUs start empty
    python scripts/gpu_tp.py compare DIR/tp1.pt DIR/tp2.pt

`run` records rank 0's logits for the first (prefill) step of 8 prompts and 16 greedy tokens each,
checks that every rank formed the same batches, then times the anchors' offline workload (256
requests, ignore_eos). `compare` prints the largest logit difference between two runs, top-1
agreement, and the throughputs. NCCL_NVLS_ENABLE=0 is set by `tp.init_distributed`.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import anchors_workload  # noqa: E402
from minisgl_edu.server.scheduler_proc import BatchRecorder  # noqa: E402

QWEN = str(ROOT / "benchmarks" / "configs" / "qwen3-0.6b")
TOL = 0.05  # bf16: |logit difference| / max |logit| that tp=N may reach against tp=1 (summation order)


def run(tp: int, out: pathlib.Path, n: int) -> None:
    llm = LLM(QWEN, device="cuda", tp=tp, dummy_weights=True)
    prompts, out_lens = anchors_workload(n)
    greedy = SamplingParams(max_tokens=16, ignore_eos=True)
    recorder = BatchRecorder(llm.engine, keep_logits=True) if tp == 1 else llm.ranks.record(logits=True)
    tokens = [o["token_ids"] for o in llm.generate(prompts[:8], greedy, use_tqdm=False)]
    if tp == 1:
        records, logits = recorder.take()
        recorder.detach()
    else:
        reports = llm.ranks.reports()
        records, logits = reports[0].records, reports[0].logits
        same = all(r.records == records for r in reports)
        print(f"tp={tp}: every rank formed the same {len(records)} batches: {same}", flush=True)
        assert same
        llm.ranks.record(stop=True)
    first = logits[0]  # the prefill step: one row per prompt
    params = [SamplingParams(max_tokens=o, ignore_eos=True) for o in out_lens]
    llm.generate(prompts[:8], SamplingParams(max_tokens=32, ignore_eos=True), use_tqdm=False)  # warm-up
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t
    generated = sum(len(o["token_ids"]) for o in outs)
    llm.close()
    result = dict(tp=tp, requests=n, tokens=generated, seconds=round(dt, 3), tok_s=round(generated / dt, 1),
                  gpu=torch.cuda.get_device_name(0))
    print(json.dumps(result), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(dict(result=result, first_logits=first, tokens=tokens), out / f"tp{tp}.pt")


def compare(a: str, b: str) -> None:
    x, y = torch.load(a), torch.load(b)
    la, lb = x["first_logits"], y["first_logits"]
    diff = (la - lb).abs().max().item()
    scale = la.abs().max().item()
    top1 = (la.argmax(-1) == lb.argmax(-1)).float().mean().item()
    same_tokens = sum(p == q for p, q in zip(x["tokens"], y["tokens"]))
    print(f"first-step logits: max |diff| = {diff:.4g} (max |logit| = {scale:.4g}, ratio {diff / scale:.3g}, "
          f"tolerance {TOL}); top-1 agreement {top1:.3f}")
    print(f"16 greedy tokens identical for {same_tokens}/{len(x['tokens'])} prompts")
    for r in (x["result"], y["result"]):
        print(f"offline throughput tp={r['tp']}: {r['tok_s']} tok/s ({r['tokens']} tokens, {r['seconds']} s, {r['gpu']})")
    if diff / scale > TOL:
        raise SystemExit(f"logits differ by more than the bf16 tolerance ({diff / scale:.3g} > {TOL})")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tp", type=int, default=1)
    r.add_argument("--out", default="out/tp")
    r.add_argument("--requests", type=int, default=256)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args.tp, pathlib.Path(args.out), args.requests)
    else:
        compare(args.a, args.b)


if __name__ == "__main__":
    main()

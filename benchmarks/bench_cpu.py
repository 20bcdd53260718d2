"""CPU benchmark of the foundation (issue 2): a script that prints a table, not a test.

(a) throughput: the default model, 8 concurrent requests x 64 new tokens (ignore_eos), the engine
    vs `transformers` `generate` one prompt at a time, measured side by side in this run;
(b) scheduler overhead per decode step with 256 running requests: a stub model stands in for the
    forward, so what is timed is everything else (schedule, assign_locations, Engine.prepare,
    sampling, process).

    python3 benchmarks/bench_cpu.py [--skip-throughput] [--skip-overhead] [--steps 200] [--no-save]

Rows go to benchmarks/results.json (a JSON list) with metric names starting "cpu_".
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

# idle OpenMP workers sleep instead of spinning: on a shared 2-core machine spinning made every
# matmul ~10x slower (must be set before torch loads its OpenMP runtime)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results.json")


# ---- where and when ------------------------------------------------------------------------------
def hardware() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    return f"{name}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def commit() -> str:
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def append_results(rows: list[dict]) -> None:
    """Append rows to benchmarks/results.json (created as a JSON list if absent)."""
    data = []
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            data = json.load(f)
    data.extend(rows)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


# ---- (a) engine vs transformers ------------------------------------------------------------------
TEXTS = ["Hello there, how are you today?", "Write a haiku about the sea:", "The three primary colours are",
         "Explain in simple words why the sky is blue.", "def fibonacci(n):\n    ",
         "List five animals that live in the ocean:", "The history of computing is a story of layers: " * 4,
         "Translate into French: the cat sits on the mat."]


def bench_throughput(n_new: int = 64) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from minisgl_edu import LLM, SamplingParams
    from minisgl_edu.default_model import default_model_path

    path = default_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    prompts = [tok.encode(t) for t in TEXTS]
    sp = SamplingParams(max_tokens=n_new, ignore_eos=True)

    llm = LLM(path, device="cpu")
    llm.generate(prompts[:2], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)  # warm-up
    llm.scheduler.pool.free(llm.scheduler.cache.evict(1 << 30))  # no prefix hits from the warm-up
    t, c = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    eng_s, eng_cpu = time.perf_counter() - t, time.process_time() - c
    eng_tokens = sum(len(o["token_ids"]) for o in outs)

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    x = torch.tensor([prompts[0]])
    with torch.no_grad():  # warm-up
        hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=4, do_sample=False, pad_token_id=0)
    # ignore_eos for transformers: no EOS at all (min_new_tokens would instead forbid sampling it)
    no_eos = copy.deepcopy(hf.generation_config)
    no_eos.update(eos_token_id=[], max_new_tokens=n_new, do_sample=False, pad_token_id=0)
    t, c = time.perf_counter(), time.process_time()
    hf_outs = []
    with torch.no_grad():
        for ids in prompts:  # one prompt at a time, as a plain transformers user would
            x = torch.tensor([ids])
            y = hf.generate(x, attention_mask=torch.ones_like(x), generation_config=no_eos)
            hf_outs.append(y[0, len(ids):].tolist())
    hf_s, hf_cpu = time.perf_counter() - t, time.process_time() - c
    hf_tokens = sum(map(len, hf_outs))
    same = sum(a["token_ids"] == b for a, b in zip(outs, hf_outs))
    return dict(engine_tok_s=eng_tokens / eng_s, hf_tok_s=hf_tokens / hf_s, engine_s=eng_s, hf_s=hf_s,
                tokens=eng_tokens, hf_tokens=hf_tokens, identical=same, n=len(prompts),
                engine_cpu_s=eng_cpu, hf_cpu_s=hf_cpu)


# ---- (b) scheduler overhead with a stub model ----------------------------------------------------
class StubModel(torch.nn.Module):
    """Stands in for the forward: hidden states of zeros, and logits that favour one token per row."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.hidden, self.vocab = hidden, vocab
        self.forward_s = 0.0

    def forward(self, input_ids, positions, backend, batch):
        t = time.perf_counter()
        h = torch.zeros(len(input_ids), self.hidden)
        self.forward_s += time.perf_counter() - t
        return h

    def logits(self, h):
        t = time.perf_counter()
        out = torch.zeros(len(h), self.vocab)
        out[:, 5] = 1.0
        self.forward_s += time.perf_counter() - t
        return out


def timed(obj, name: str, acc: dict, key: str):
    """Wrap obj.name so the time spent in it adds up in acc[key]."""
    fn = getattr(obj, name)

    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            acc[key] += time.perf_counter() - t
    setattr(obj, name, wrapper)


def bench_overhead(num_reqs: int = 256, prompt_len: int = 128, steps: int = 200, page_size: int = 1) -> dict:
    from transformers import LlamaConfig

    from minisgl_edu.config import SchedulerConfig
    from minisgl_edu.engine import Engine
    from minisgl_edu.req import SamplingParams
    from minisgl_edu.scheduler import Scheduler

    with tempfile.TemporaryDirectory() as d:
        # a small vocabulary: sampling over 49k logits is device work, not scheduler overhead
        LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=4096).save_pretrained(d)
        cfg = SchedulerConfig(model_path=d, device="cpu", page_size=page_size, max_running_reqs=num_reqs,
                              max_total_tokens=num_reqs * (prompt_len + steps + 32), dummy_weights=True,
                              max_prefill_tokens=num_reqs * prompt_len)
        engine = Engine(cfg)
    engine.model = StubModel(64, engine.vocab_size)
    sched = Scheduler(engine, cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # host bookkeeping is single-threaded; idle OpenMP workers only add noise
    for uid in range(num_reqs):
        sched.add_request(uid, [(uid * 7 + i) % 500 + 1 for i in range(prompt_len)],
                          SamplingParams(max_tokens=steps + 16, ignore_eos=True))
    sched.step()  # one prefill step admits all of them
    assert len(sched.running) == num_reqs, len(sched.running)
    for _ in range(5):  # warm-up decode steps
        sched.step()
    acc = defaultdict(float)
    timed(sched, "schedule", acc, "schedule")
    timed(sched.pool, "assign_locations", acc, "assign_locations")
    timed(engine, "prepare", acc, "Engine.prepare")
    timed(sched, "process", acc, "process")
    engine.model.forward_s = 0.0
    t, cpu, per_step = time.perf_counter(), time.process_time(), []
    for _ in range(steps):
        t0, m0 = time.perf_counter(), engine.model.forward_s
        sched.step()
        per_step.append((time.perf_counter() - t0 - (engine.model.forward_s - m0)) * 1e3)
    total, cpu = time.perf_counter() - t, time.process_time() - cpu
    torch.set_num_threads(threads)
    assert all(st.batch_size == num_reqs for st in sched.stats[-steps:] if st.phase == "decode")
    model_s = engine.model.forward_s
    per = {k: v / steps * 1e3 for k, v in acc.items()}
    per["other (sampling, ledger)"] = (total - model_s - sum(acc.values())) / steps * 1e3
    # on a shared machine wall time includes waiting for a core; CPU time is what this process spent
    per_step.sort()
    return dict(ms_per_step=(total - model_s) / steps * 1e3, cpu_ms_per_step=(cpu - model_s) / steps * 1e3,
                median_ms=per_step[len(per_step) // 2], min_ms=per_step[0],
                parts=per, num_reqs=num_reqs, steps=steps, stub_ms=model_s / steps * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    hw, date, sha = hardware(), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), commit()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"hardware: {hw}\ndate: {date}\ncommit: {sha}\nload average (1 min) at start: {load:.2f}\n")
    meta = dict(hardware=hw, date=date, commit=sha, load_avg_1min=round(load, 2),
                command="python3 benchmarks/bench_cpu.py " + " ".join(sys.argv[1:]))
    rows = []
    if not args.skip_throughput:
        r = bench_throughput()
        ratio = r["engine_tok_s"] / r["hf_tok_s"]
        print("(a) default model, 8 concurrent requests x 64 new tokens (ignore_eos), float32")
        print(f"    {'':34}{'tokens':>8}{'wall s':>10}{'tokens/s':>10}{'CPU s':>10}")
        print(f"    {'minisgl_edu engine (batched)':34}{r['tokens']:>8}{r['engine_s']:>10.2f}{r['engine_tok_s']:>10.1f}"
              f"{r['engine_cpu_s']:>10.2f}")
        print(f"    {'transformers generate, one by one':34}{r['hf_tokens']:>8}{r['hf_s']:>10.2f}{r['hf_tok_s']:>10.1f}"
              f"{r['hf_cpu_s']:>10.2f}")
        # on a shared machine the wall-clock ratio moves with other processes' load; CPU time less so
        cpu_ratio = (r["tokens"] / r["engine_cpu_s"]) / (r["hf_tokens"] / r["hf_cpu_s"])
        print(f"    ratio engine / transformers: {ratio:.2f}x wall-clock (target >= 3x), {cpu_ratio:.2f}x per CPU second")
        print(f"    greedy outputs identical to transformers: {r['identical']}/{r['n']}\n")
        rows += [dict(metric="cpu_engine_tokens_per_s", value=round(r["engine_tok_s"], 2), unit="tok/s", **meta),
                 dict(metric="cpu_transformers_tokens_per_s", value=round(r["hf_tok_s"], 2), unit="tok/s", **meta),
                 dict(metric="cpu_engine_vs_transformers_ratio", value=round(ratio, 3), unit="x", target=">= 3",
                      cpu_time_ratio=round(cpu_ratio, 3), **meta)]
    if not args.skip_overhead:
        r = bench_overhead(steps=args.steps)
        print(f"(b) scheduler overhead per decode step, {r['num_reqs']} running requests, stub model "
              f"({r['steps']} steps; the stub itself took {r['stub_ms']:.3f} ms/step and is excluded)")
        for k, v in r["parts"].items():
            print(f"    {k:34}{v:>8.3f} ms")
        print(f"    {'total per step (wall, mean)':34}{r['ms_per_step']:>8.3f} ms   (target <= 2 ms)")
        print(f"    {'per step (wall, median / min)':34}{r['median_ms']:>8.3f} / {r['min_ms']:.3f} ms")
        print(f"    {'total per step (process CPU time)':34}{r['cpu_ms_per_step']:>8.3f} ms")
        rows.append(dict(metric="cpu_scheduler_overhead_ms_per_decode_step", value=round(r["ms_per_step"], 4),
                         unit="ms", running_reqs=r["num_reqs"], target="<= 2",
                         cpu_ms_per_step=round(r["cpu_ms_per_step"], 4), median_ms=round(r["median_ms"], 4),
                         min_ms=round(r["min_ms"], 4),
                         parts={k: round(v, 4) for k, v in r["parts"].items()}, **meta))
    if rows and not args.no_save:
        append_results(rows)
        print(f"\nwrote {len(rows)} rows to {os.path.relpath(RESULTS, ROOT)}")


if __name__ == "__main__":
    main()

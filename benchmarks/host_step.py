"""Issue 16: the host's share of one decode step — everything `Scheduler.step` does outside the model.

    python benchmarks/host_step.py [--device cpu|cuda] [--bs 1,256] [--steps 40] [--lean 0,1] [--model DIR]

Runs a decode workload through the real scheduler (tiny random Llama on the CPU, or the folder given)
and reports, per step: the wall time of `Scheduler.step`, the time spent inside the model's forward and
LM head (excluded: that is the kernels' side), their difference (the host's own work: schedule, slots,
prepare, plan, sampling, process) and how many tensor operations that host work dispatched (aten ops
counted by a TorchDispatchMode outside the model; each one is a launch or a copy on a GPU).
`--lean 0,1` runs the plain step (`lean_step=False`) and the lean one side by side.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


# views and other metadata-only ops: no launch, no copy on a GPU
FREE = {"view", "slice", "select", "unsqueeze", "squeeze", "expand", "detach", "alias", "resolve_conj", "resolve_neg",
        "as_strided", "t", "transpose", "permute", "reshape", "_reshape_alias", "unbind", "split"}


class CountOps(TorchDispatchMode):
    """Counts aten ops that launch or copy (FREE excluded) while `on` (switched off inside the model's calls).
    On the CPU a host-to-device copy shows as `lift_fresh` (torch.from_numpy), on CUDA as pin + copy."""

    def __init__(self):
        super().__init__()
        self.n, self.on = 0, True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += self.on and func.overloadpacket.__name__ not in FREE
        return func(*args, **(kwargs or {}))


def instrument(eng, counter: CountOps | None):
    """Wrap the model's forward and LM head: accumulate their seconds; stop counting ops inside them."""
    spent = [0.0]
    model = eng.model
    fwd, logits = model.forward, model.logits
    graphs = eng.graphs

    def timed(fn):
        def run(*a, **k):
            if counter is not None:
                counter.on = False
            t = time.perf_counter()  # the wait for queued GPU work counts as the model's too
            if eng.device.type == "cuda":
                torch.cuda.synchronize()
            out = fn(*a, **k)
            if eng.device.type == "cuda":
                torch.cuda.synchronize()
            spent[0] += time.perf_counter() - t
            if counter is not None:
                counter.on = True
            return out
        return run
    model.forward, model.logits = timed(fwd), timed(logits)
    if graphs is not None:
        graphs.replay = timed(graphs.replay)
    return spent


def measure(model_dir: str, device: str, bs: int, steps: int, leans: list[bool], count: bool) -> list[dict]:
    """One engine for batch size `bs`; for each lean_step value: `steps` timed decode steps, then 5 counted."""
    from minisgl_edu import LLM, SamplingParams
    from minisgl_edu.config import EngineConfig
    has_switch = "lean_step" in EngineConfig.__dataclass_fields__  # older code: no switch, one plain run
    leans = leans if has_switch else [False]
    max_tokens = (steps + 10) * len(leans) + 20
    llm = LLM(model_dir, device=device, dummy_weights=True, max_running_reqs=max(bs, 1), cuda_graph_max_bs=max(bs, 1),
              max_total_tokens=bs * (16 + max_tokens) + 4096)
    sched, eng = llm.scheduler, llm.engine
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    vocab = eng.vocab_size
    for i in range(bs):
        sched.add_request(i, [(7 * i + j) % vocab for j in range(16)], sp)
    while sched.pending:  # prefill everyone
        sched.step()
    counter = CountOps()
    spent = instrument(eng, counter)
    rows = []
    for lean in leans:
        if has_switch:
            eng.lean_step = lean
        for _ in range(5):  # warm up the decode path
            sched.step()
        spent[0], walls = 0.0, []
        for _ in range(steps):
            t = time.perf_counter()
            sched.step()
            walls.append(time.perf_counter() - t)
        wall, model = sum(walls) / steps, spent[0] / steps
        ops = None
        if count:
            counter.n = 0
            with counter:
                for _ in range(5):
                    sched.step()
            ops = counter.n / 5
        rows.append(dict(device=device, bs=bs, lean=lean, step_us=wall * 1e6, model_us=model * 1e6,
                         host_us=(wall - model) * 1e6, host_ops=ops))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bs", default="1,256")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lean", default="0,1")
    ap.add_argument("--model", default=None, help="a model folder (config only is enough); default: a tiny Llama")
    ap.add_argument("--no-count", action="store_true", help="skip the op count (it slows the step itself)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model_dir = args.model
    if model_dir is None:
        sys.path.insert(0, ".")
        from tests.tiny_model import tiny_model_dir
        model_dir = tiny_model_dir(tempfile.mkdtemp(), vocab=4096, max_positions=1024)
    rows = []
    for bs in (int(b) for b in args.bs.split(",")):
        for r in measure(model_dir, args.device, bs, args.steps, [bool(int(x)) for x in args.lean.split(",")],
                         count=not args.no_count):
            rows.append(r)
            print(f"bs {bs:4d} lean_step={r['lean']!s:5}: step {r['step_us']:8.1f} us, model {r['model_us']:8.1f} us,"
                  f" host {r['host_us']:8.1f} us, launching host ops {r['host_ops']}", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
            if eng.device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
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


def measure(model_dir: str, device: str, bs: int, steps: int, lean: bool, count: bool) -> dict:
    from minisgl_edu import LLM, SamplingParams
    from minisgl_edu.config import EngineConfig
    switch = {"lean_step": lean} if "lean_step" in EngineConfig.__dataclass_fields__ else {}  # older code: no switch
    llm = LLM(model_dir, device=device, dummy_weights=True, max_running_reqs=max(bs, 1), cuda_graph_max_bs=max(bs, 1),
              max_total_tokens=bs * 200 + 4096, **switch)
    sched = llm.scheduler
    sp = SamplingParams(max_tokens=steps + 20, ignore_eos=True)
    vocab = llm.engine.vocab_size
    for i in range(bs):
        sched.add_request(i, [(7 * i + j) % vocab for j in range(16)], sp)
    while sched.pending:  # prefill everyone
        sched.step()
    for _ in range(5):  # warm up the decode path
        sched.step()
    counter = CountOps() if count else None
    spent = instrument(llm.engine, counter)
    walls = []
    for _ in range(steps):
        if counter is not None:
            with counter:
                t = time.perf_counter()
                sched.step()
                walls.append(time.perf_counter() - t)
        else:
            t = time.perf_counter()
            sched.step()
            walls.append(time.perf_counter() - t)
    wall = sum(walls) / steps
    return dict(device=device, bs=bs, lean=lean, step_us=wall * 1e6, model_us=spent[0] / steps * 1e6,
                host_us=(wall - spent[0] / steps) * 1e6, host_ops=(counter.n / steps) if counter else None)


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
        for lean in (bool(int(x)) for x in args.lean.split(",")):
            timed = measure(model_dir, args.device, bs, args.steps, lean, count=False)
            if not args.no_count:
                timed["host_ops"] = measure(model_dir, args.device, bs, 5, lean, count=True)["host_ops"]
            rows.append(timed)
            print(f"bs {bs:4d} lean_step={lean!s:5}: step {timed['step_us']:8.1f} us, model {timed['model_us']:8.1f} us,"
                  f" host {timed['host_us']:8.1f} us, host tensor ops {timed['host_ops']}", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

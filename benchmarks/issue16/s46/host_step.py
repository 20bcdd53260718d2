"""Session 46: where a CUDA-graph decode step's time goes on the host, at batch 1 and 256 (P2's batch, context 1k).

    python benchmarks/issue16/s46/host_step.py [OUT_DIR]

For each batch size: the step back to back (P2's way), the GPU's own time per step (the timeline's events), then
the host's time in each phase of Engine.forward (timers wrapped around the engine's own functions, 200 steps),
cProfile's top functions, and a torch.profiler trace of 10 steps (OUT_DIR/trace_bs{N}.json.gz) to read the GPU's
idle gaps against the host's calls."""
from __future__ import annotations

import cProfile
import collections
import gzip
import io
import pathlib
import pstats
import shutil
import sys
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from minisgl_edu import LLM  # noqa: E402
from minisgl_edu import engine as engine_mod  # noqa: E402
from minisgl_edu.attention import base as base_mod  # noqa: E402
from minisgl_edu.attention import flashinfer as fi_mod  # noqa: E402
from minisgl_edu.bench import make_decode_batch, release, time_steps  # noqa: E402
from minisgl_edu.model import qk_kernel  # noqa: E402
from minisgl_edu.trace import Timeline  # noqa: E402

OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(".")
QWEN = str(ROOT / "benchmarks" / "configs" / "qwen3-0.6b")
ACC: dict[str, list[float]] = collections.defaultdict(list)


def wrap(owner, name: str, label: str) -> None:
    f = getattr(owner, name)

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            ACC[label].append(time.perf_counter() - t)
    setattr(owner, name, timed)


def main() -> None:
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256)
    eng = llm.engine
    print(torch.cuda.get_device_name(), flush=True)
    for bs in (1, 256):
        batch = make_decode_batch(eng, bs, 1024, seed=bs)
        step = time_steps(lambda: eng.forward(batch), iters=200)
        eng.timeline = Timeline(eng.device)
        time_steps(lambda: eng.forward(batch), iters=100)
        st = eng.timeline.steps(5)
        eng.timeline = None
        gpu = float(np.median([s.device_end - s.device_start for s in st]))
        cpu = float(np.median([s.cpu_end - s.cpu_start for s in st]))
        print(f"\n== batch {bs}: step {step * 1e3:.3f} ms back to back; GPU span of a step {gpu * 1e3:.3f} ms; "
              f"_forward's CPU time {cpu * 1e3:.3f} ms", flush=True)
        # the host's phases: the engine's own functions, timed where they are called
        saved = []
        targets = [(eng, "forward", "forward (all)"), (eng, "_forward", "_forward"), (eng, "prepare", "prepare"),
                   (engine_mod, "step_layout", "  step_layout"), (eng.backend, "prepare", "  backend.prepare"),
                   (base_mod, "kernel_args", "    kernel_args"), (eng.backend, "plan", "    plan"),
                   (eng.backend, "_plan_decode", "      _plan_decode"), (eng.graphs, "replay", "replay (copies + launch)"),
                   (eng.model, "logits", "logits (LM head launch)"), (qk_kernel, "greedy", "greedy launch"),
                   (eng.sampling_cache, "get", "sampling_cache.get")]
        for owner, name, label in targets:
            saved.append((owner, name, getattr(owner, name) if name in vars(owner) else None))
            wrap(owner, name, label)
        ACC.clear()
        time_steps(lambda: eng.forward(batch), iters=200)
        for owner, name, f in saved:
            if f is None:
                delattr(owner, name)
            else:
                setattr(owner, name, f)
        print(f"  {'phase':<30} {'calls':>6} {'median us':>10} {'mean us':>9}")
        for _, _, label in targets:
            v = ACC.get(label, [])
            if v:
                print(f"  {label:<30} {len(v):>6} {np.median(v) * 1e6:>10.1f} {np.mean(v) * 1e6:>9.1f}")
        # cProfile: which Python functions the host time is in
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            eng.forward(batch)
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
        print("\n".join(s.getvalue().splitlines()[:60]), flush=True)
        # a trace of 10 steps: the GPU's gaps against the host's calls
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                eng.forward(batch)
            torch.cuda.synchronize()
        path = OUT / f"trace_bs{bs}.json"
        prof.export_chrome_trace(str(path))
        with open(path, "rb") as a, gzip.open(str(path) + ".gz", "wb") as b:
            shutil.copyfileobj(a, b)
        path.unlink()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
        release(eng, batch)


if __name__ == "__main__":
    main()

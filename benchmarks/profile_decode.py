"""Issue 16: the GPU kernels of one decode step at batch 1 (Qwen3-0.6B architecture, dummy weights, bf16).

    python benchmarks/profile_decode.py TAG [--plain] [--no-qk-kernel] [--lean-off] [--small-m] [--blas cublaslt] [--bs 1,64]
                                           [--json OUT.jsonl] [--timeline SPANS.jsonl] [--no-pdl] [--no-skinny-gemm]
                                           [--skinny-ga G,A] [--pipe PIPE.json] [--cutlass CUTLASS.json]

Profiles one eager step (engine.forward without graphs) and one CUDA-graph replay with torch.profiler,
prints every distinct kernel with its count per step and mean time, the kernels of one decoder layer in
launch order (cut out of the replay between two launches of the attention kernel), and times the step
(graph and eager) and the replay alone. --plain: fused kernels off (fused_kernels=False);
--no-qk-kernel: FlashInfer's kernels for q/k norm, RoPE and the K/V copy instead of our one-launch kernel;
--lean-off: the plain step (lean_step=False); --small-m: our kernels for <= 8 rows (o_proj; SiLU-and-mul +
down GEMM in one launch); --blas cublaslt: the GEMMs through cuBLASLt (set before capture); --no-pdl: our GEMVs
launched plainly; --no-skinny-gemm: cuBLAS for 2-16 rows, not our tensor-core GEMM; --timeline: each replay's
kernels with their start and end (chapter 7's PDL figure); --pipe (a probe of session 37): 17-256 rows of the
row-major products through benchmarks/kernels/pipe_gemm.cu, the fastest configuration `lt_probe.py --pipe --json`
found for each product at the nearest probed rows at or above, where it beat torch there (else cuBLAS); --cutlass
(session 38): the same with `lt_probe.py --cutlass --json`'s variants of benchmarks/kernels/cutlass_swap_ab.cu.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = pathlib.Path(__file__).resolve().parents[1]
QWEN = str(ROOT / "benchmarks" / "configs" / "qwen3-0.6b")


def spans(fn) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of every GPU operation `fn` ran, in start order, from the first one's start."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    t0 = evs[0].time_range.start if evs else 0
    return [(e.name, e.time_range.start - t0, e.time_range.end - t0) for e in evs]


def kernels(fn) -> list[tuple[str, float]]:
    """(name, µs) of every GPU operation `fn` ran, in start order."""
    return [(n, end - start) for n, start, end in spans(fn)]


def short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def one_layer(ks: list[tuple[str, float]], layers: int) -> list[tuple[str, float]]:
    """The launches between the 2nd and 3rd launch of a kernel that runs exactly once per layer (attention)."""
    names = [n for n, _ in ks]
    for cand in dict.fromkeys(names):
        if names.count(cand) == layers and ("Decode" in cand or "decode" in cand or "Attention" in cand):
            idx = [i for i, n in enumerate(names) if n == cand]
            period = idx[2] - idx[1]
            # mean time of each position of the cycle over all full layers
            out = []
            for j in range(period):
                ts = [ks[i + j][1] for i in idx[:-1] if i + j < len(ks)]
                out.append((ks[idx[1] + j][0], sum(ts) / len(ts)))
            return out
    return []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tag")
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--no-qk-kernel", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeline", default=None, help="append each batch's graph replay as kernel spans (JSON lines)")
    ap.add_argument("--bs", default="1", help="batch sizes, comma-separated")
    ap.add_argument("--blas", default=None, help="torch.backends.cuda.preferred_blas_library before capture (cublaslt)")
    ap.add_argument("--lean-off", action="store_true", help="lean_step=False (the plain step's host work)")
    ap.add_argument("--no-gemv-kernel", dest="gemv_kernel", action="store_false", help="cuBLAS at one row, not our GEMV")
    ap.add_argument("--no-pdl", dest="pdl", action="store_false", help="our GEMVs launched plainly (no programmatic dependent launch)")
    ap.add_argument("--no-skinny-gemm", dest="skinny_gemm", action="store_false", help="cuBLAS for 2-16 rows, not skinny_gemm.cu")
    ap.add_argument("--skinny-ga", default=None, help="G,A: skinny_gemm.cu's variant with x copied in G groups and A "
                    "accumulator chains (a probe of session 36; the model's is 1,1)")
    ap.add_argument("--pipe", default=None, help="lt_probe.py --pipe's JSON: 17-256 rows through pipe_gemm.cu")
    ap.add_argument("--cutlass", default=None, help="lt_probe.py --cutlass's JSON: 17-256 rows through cutlass_swap_ab.cu")
    args = ap.parse_args()
    if args.pipe and args.cutlass:
        ap.error("--pipe and --cutlass: one product kernel at a time")
    for kind in ("pipe", "cutlass"):
        if path := getattr(args, kind):
            try:
                install_probe(path, kind)
            except (OSError, ValueError, KeyError, TypeError) as e:  # not lt_probe.py --KIND --json's output
                ap.error(f"--{kind} {path!r}: not lt_probe.py --{kind}'s JSON ({type(e).__name__}: {e})")
    if args.blas:
        torch.backends.cuda.preferred_blas_library(args.blas)
    from minisgl_edu import LLM
    from minisgl_edu.bench import make_decode_batch, release
    if args.skinny_ga:  # before the engine: its plans are made at the first launch of each shape
        from minisgl_edu.model import qk_kernel
        ga = tuple(int(v) for v in args.skinny_ga.split(",") if v.strip().isdigit())
        if ga not in qk_kernel.SKINNY_GA_BUILT:  # an unbuilt pair would silently fall back to cuBLAS
            ap.error(f"--skinny-ga {args.skinny_ga!r}: one of {', '.join(f'{g},{a}' for g, a in qk_kernel.SKINNY_GA_BUILT)}")
        qk_kernel.SKINNY_GA = ga
    sizes = [int(b) for b in args.bs.split(",")]
    switches = {**({"fused_kernels": False} if args.plain else {}), **({"qk_kernel": False} if args.no_qk_kernel else {}),
                **({"gemv_kernel": False} if not args.gemv_kernel else {}), **({"pdl": False} if not args.pdl else {}),
                **({"lean_step": False} if args.lean_off else {}), **({"skinny_gemm": False} if not args.skinny_gemm else {})}
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=max(sizes), cuda_graph_max_bs=max(sizes),
              max_total_tokens=max(sizes) * 1100 + 4096, **switches)  # only the switches given: "before" code lacks them
    eng = llm.engine
    nl = eng.model_config.num_hidden_layers
    rows = []
    for bs in sizes:
        batch = make_decode_batch(eng, bs, 1024, seed=1)
        rows.append(profile_batch(args.tag, eng, batch, nl))
        if args.timeline:  # start and end of every kernel of one replay: does the next start before the last ends?
            g = eng.graphs.graphs[eng.graphs.padded_size(batch.size)]
            eng.forward(batch)  # plan the graph's wrapper for this batch first
            with open(args.timeline, "a") as f:
                f.write(json.dumps(dict(tag=args.tag, bs=bs, layers=nl, spans=spans(g.replay))) + "\n")
        release(eng, batch)
    if args.json:
        with open(args.json, "a") as f:  # one line per profiled variant and batch size
            for r in rows:
                f.write(json.dumps(r) + "\n")


PROBES = {"pipe": ("Pipe", "pipe_gemm.cubin (scripts/build_fi_extra_kernels.sh)"),  # --KIND: lt_probe's class, its file
          "cutlass": ("Cutlass", "cutlass_swap_ab.so (CUTLASS=1 bash scripts/build_fi_extra_kernels.sh)")}


def install_probe(path: str, kind: str = "pipe") -> None:
    """layers.few_rows, wrapped: 17-256 rows of a row-major product whose shape lt_probe.py --KIND timed go to that
    probe's fastest configuration at the nearest probed rows at or above (the same or more row tiles, so it covers
    them), where that beat torch; everything else as before. kind: "pipe" (pipe_gemm.cu) or "cutlass"."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lt_probe
    from minisgl_edu.model import layers
    probed = [r for r in json.load(open(path))[kind] if r["gemm"] != "layer"]
    pp = getattr(lt_probe, PROBES[kind][0])(torch.device("cuda"))
    if not pp.available():
        sys.exit(f"--{kind}: no {PROBES[kind][1]}")
    label = lt_probe.cfg_name if kind == "pipe" else lambda cfg: pp.names[cfg[0]]
    if kind == "cutlass":  # stream-K's workspace, sized once for the largest launch: none may grow under graph capture
        pp.reserve([(tuple(r["best"]["cfg"]), m, r["n"], r["k"]) for r in probed if r["best"] for m in range(17, 257)])
    chosen: dict[tuple[int, int, int], tuple | None] = {}

    def pick(n: int, k: int, m: int):
        if (n, k, m) not in chosen:
            above = sorted((r for r in probed if (r["n"], r["k"]) == (n, k) and r["m"] >= m), key=lambda r: r["m"])
            r = above[0] if above else None
            chosen[n, k, m] = tuple(r["best"]["cfg"]) if r and r["best"] and r["best"]["us_pdl"] < r["torch_us"] else None
            print(f"--{kind}: [{n}, {k}] at {m} rows: " + (label(chosen[n, k, m]) if chosen[n, k, m] else "cuBLAS"),
                  flush=True)
        return chosen[n, k, m]
    plain = layers.few_rows

    def few_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
        m = x.shape[0]
        if 17 <= m <= 256 and x.dtype == torch.bfloat16 and x.is_contiguous() and w.is_contiguous() \
                and x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0 \
                and (cfg := pick(w.shape[0], w.shape[1], m)) is not None:  # 16-byte loads (cp.async, TMA)
            out = torch.empty(m, w.shape[0], dtype=x.dtype, device=x.device)
            pp.mm(x, w, out, cfg, pdl=True)
            return out
        return plain(x, w)
    layers.few_rows = few_rows


def profile_batch(tag, eng, batch, nl) -> dict:
    from minisgl_edu.bench import time_steps
    graphs = eng.graphs
    eng.graphs = None
    eager = kernels(lambda: eng.forward(batch))
    t_eager = time_steps(lambda: eng.forward(batch), iters=30)
    eng.graphs = graphs
    t_graph = time_steps(lambda: eng.forward(batch), iters=100)
    g = graphs.graphs[graphs.padded_size(batch.size)]
    t_replay = time_steps(g.replay, iters=200)
    eng.forward(batch)  # plan the graph's wrapper for this batch before profiling the replay alone
    replay = kernels(g.replay)
    layer = one_layer(replay, nl)
    print(f"\n== {tag}: batch {batch.size}, ctx 1024, {nl} layers")
    print(f"eager step: {len(eager)} GPU ops ({len(eager) / nl:.1f} per layer); graph replay: {len(replay)} kernels; "
          f"one layer: {len(layer)} kernels, {sum(t for _, t in layer):.1f} us")
    print(f"step time: graph {t_graph * 1e3:.3f} ms, eager {t_eager * 1e3:.3f} ms, replay alone {t_replay * 1e3:.3f} ms")
    print("one decoder layer (graph replay), launch order, mean us over the layers:")
    for name, t in layer:
        print(f"  {t:7.2f}  {short(name)}")
    first = next((i for i, (n, _) in enumerate(eager) if "Decode" in n or "Prefill" in n), 0)
    print("eager step, the ops around the layers (before the first attention kernel, and the last 12):")
    for name, t in eager[:first] + [("...", 0.0)] + eager[-12:]:
        print(f"  {t:7.2f}  {short(name)}")
    counts: dict[str, list[float]] = {}
    for n, t in eager:
        counts.setdefault(n, []).append(t)
    print("eager step, every distinct GPU op: count, mean us")
    for n, ts in sorted(counts.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ts):5d} {sum(ts) / len(ts):8.2f}  {short(n)}")
    return dict(tag=tag, bs=batch.size, layers=nl, eager_ops=len(eager), replay_kernels=len(replay), layer=layer,
                step_graph_ms=t_graph * 1e3, step_eager_ms=t_eager * 1e3, replay_ms=t_replay * 1e3,
                replay_us_total=sum(t for _, t in replay),
                eager_counts={n: [len(ts), sum(ts) / len(ts)] for n, ts in counts.items()})




if __name__ == "__main__":
    sys.exit(main())

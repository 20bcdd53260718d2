"""Append the serving figures of one `scripts/gpu_serve.sh` run (its gpu_serve.json) to benchmarks/results.json.

    python scripts/record_serve.py PATH/gpu_serve.json [--note "what changed"]

Per model: serve vs offline (all at once), serve's output throughput with the per-process CPU report, and at the
half-peak rate (the sweep's 0.5x): TTFT p99 and ITL p99 against twice the median decode step (issue 18's targets; the
median from the step histogram's buckets where the run has it, `step_median_ms`, else the mean, `step_ms`).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results.json"


def rows(run: dict, note: str) -> list[dict]:
    date = run["date"].replace("T", " ")[:16] + " UTC"
    base = dict(hardware="NVIDIA H200", date=date, commit=run["commit"], command="bash scripts/gpu_serve.sh")
    out = []
    for model, r in run["models"].items():
        m = model.replace("-", "_").replace(".", "_")
        one = r["runs"][0]
        off, srv = one["offline"]["output_throughput"], one["serve"]["output_throughput"]
        cpu = ", ".join(f"{k} {v['us_per_token']:.1f} us ({v['cpu_pct']:.0f} %)" for k, v in one["serve"].get("cpu", {}).items())
        out.append(dict(metric=f"serve_vs_offline_{m}", value=round(srv / off, 3), unit="x", ratio=round(srv / off, 3),
                        note=f"256 anchors requests all at once, streamed: serve {srv:.0f} / offline {off:.0f} tok/s "
                             f"(target >= 0.95){note}", **base))
        out.append(dict(metric=f"serve_output_throughput_{m}", value=round(srv, 1), unit="tok/s", ratio=None,
                        note=f"through serve, all at once; CPU per token {cpu}", **base))
        # the sweep's 1x: the all-at-once run's request rate (what bench compare multiplied by 0.5 for "0.5x")
        peak = statistics.median(x["serve"]["request_throughput"] for x in r["runs"])
        half = [s for s in r["sweep"] if abs(s["request_rate"] - peak / 2) < 0.01 * peak]  # a sweep may repeat 0.5x
        half = half or [min(r["sweep"], key=lambda s: abs(s["request_rate"] - peak / 2))]
        s, n = half[0], len(half)
        ttfts = [h["ttft_ms"]["p99"] for h in half]
        out.append(dict(metric=f"online_half_peak_ttft_p99_{m}", value=round(statistics.median(ttfts), 1), unit="ms",
                        ratio=None, note=f"Poisson {s['request_rate']:.1f} req/s, {s['completed']} requests "
                                         f"(target <= 100 ms); TTFT p50 {s['ttft_ms']['median']:.1f} ms"
                                         + (f"; median of {n} runs: {', '.join(f'{t:.1f}' for t in ttfts)}" if n > 1 else ""),
                        **base))
        itls, ratios, steps, read_ratios = [], [], [], []
        for h in half:
            median = h.get("step_median_ms", {}).get("decode")  # older runs have only the mean
            step, which = (median, "median") if median else (h["step_ms"].get("decode"), "mean")
            itls.append(h["itl_ms"]["p99"])
            ratios.append(h["itl_ms"]["p99"] / step if step else None)
            if step and h.get("arrival_clock", "read") != "read":  # the same run by the read time too
                read_ratios.append(h["itl_read_ms"]["p99"] / step)
            steps.append(step)
        phases = ", ".join(f"{p} {v:.2f} ms" for p, v in sorted(s["step_ms"].items()))
        if n == 1:
            note = (f"ratio = ITL p99 / {which} decode step ({steps[0]:.2f} ms) (target <= 2: the median); ITL p50 "
                    f"{s['itl_ms']['median']:.2f} ms; mean step by phase: {phases}")
        else:
            each = ", ".join(f"{i:.2f} / {st:.2f}" for i, st in zip(itls, steps))
            note = (f"median of {n} runs at the same rate (fresh prompts each): ratio = ITL p99 / {which} decode step, "
                    f"per run {', '.join(f'{q:.2f}' for q in ratios if q)} (ITL p99 / step ms: {each}) (target <= 2)")
        if read_ratios:
            note += (f"; timed by each read's arrival ({s['arrival_clock']} stamps); by the client's read time the "
                     f"ratio read {', '.join(f'{q:.2f}' for q in read_ratios)}")
        if "step_p99_ms" in s:
            note += "; step p99 (every phase) " + ", ".join(f"{h['step_p99_ms']:.2f}" for h in half if "step_p99_ms" in h) + " ms"
        good = [q for q in ratios if q]
        out.append(dict(metric=f"online_half_peak_itl_p99_{m}", value=round(statistics.median(itls), 2), unit="ms",
                        ratio=round(statistics.median(good), 2) if good else None, note=note, **base))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    new = rows(json.loads(pathlib.Path(a.path).read_text()), f"; {a.note}" if a.note else "")
    old = json.loads(RESULTS.read_text())
    RESULTS.write_text(json.dumps(old + new, indent=1) + "\n")
    for r in new:
        print(f"{r['metric']:45s} {r['value']:>10} {r['unit']:6s} ratio={r['ratio']}")


if __name__ == "__main__":
    main()

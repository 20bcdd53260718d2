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
        peak = max(s["request_rate"] for s in r["sweep"])  # the sweep's 1x: the all-at-once run's request rate
        s = min(r["sweep"], key=lambda s: abs(s["request_rate"] - peak / 2))
        median = s.get("step_median_ms", {}).get("decode")  # older runs have only the mean
        step, which = (median, "median") if median else (s["step_ms"].get("decode"), "mean")
        out.append(dict(metric=f"online_half_peak_ttft_p99_{m}", value=round(s["ttft_ms"]["p99"], 1), unit="ms",
                        ratio=None, note=f"Poisson {s['request_rate']:.1f} req/s, {s['completed']} requests "
                                         f"(target <= 100 ms); TTFT p50 {s['ttft_ms']['median']:.1f} ms", **base))
        itl = s["itl_ms"]["p99"]
        steps = ", ".join(f"{p} {v:.2f} ms" for p, v in sorted(s["step_ms"].items()))
        out.append(dict(metric=f"online_half_peak_itl_p99_{m}", value=round(itl, 2), unit="ms",
                        ratio=round(itl / step, 2) if step else None,
                        note=f"ratio = ITL p99 / {which} decode step ({step:.2f} ms) (target <= 2: the median); ITL p50 "
                             f"{s['itl_ms']['median']:.2f} ms; mean step by phase: {steps}", **base))
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

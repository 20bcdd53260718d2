"""How far apart one figure reads across runs (issue 16): every reading of a metric in results.json on one kind of
GPU, by date, with its ratio, and the spread (min, median, max). A target that sits inside that spread is "on the
line": one reading that meets it, or misses it, says little. With --kernel, the figure is one kernel's microseconds
a layer, read from the `*_kernels_per_layer_bs*` rows (the graph replay's kernel list), e.g. the decode attention.

    python3 benchmarks/spread.py p2_decode_step_bs256_graph --gpu H200 --since 2026-12-01 --at-most 1.2
    python3 benchmarks/spread.py --kernel BatchDecodeWith --bs 256 --gpu H200
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"


def kernel_us(note: str, kernel: str) -> float | None:
    """The first `kernel` entry's µs in a kernel list note ("... us per layer: void flashinfer::X 266.7, nvjet ...")."""
    listing = note.split("us per layer:", 1)[-1] if "us per layer:" in note else ""
    for part in listing.split(","):
        m = re.match(r"\s*(.*\S)\s+([0-9.]+)\s*$", part)
        if m and kernel in m.group(1):
            return float(m.group(2))
    return None


def readings(rows: list[dict], gpu: str, metric: str | None = None, kernel: str | None = None,
             bs: int = 256, since: str = "") -> list[tuple[str, str, str, float, float | None]]:
    """(date, commit, metric, value, ratio) for each matching row dated `since` or later, oldest first. `metric`
    matches exactly; `kernel` reads every `*_kernels_per_layer_bs{bs}` row whose kernel list has it (ratio None)."""
    out = []
    for r in rows:
        if gpu not in r.get("hardware", "") or r["date"] < since:
            continue
        if kernel is not None:
            if r["metric"].endswith(f"_kernels_per_layer_bs{bs}") and (us := kernel_us(r["note"], kernel)) is not None:
                out.append((r["date"], r["commit"], r["metric"], us, None))
        elif r["metric"] == metric:
            out.append((r["date"], r["commit"], r["metric"], float(r["value"]), r["ratio"]))
    return sorted(out, key=lambda x: x[0])


def summary(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metric", nargs="?", help="a metric name in results.json (exact)")
    ap.add_argument("--kernel", help="a kernel's name, or part of it, in the kernels-per-layer rows")
    ap.add_argument("--bs", type=int, default=256, help="with --kernel: the batch size of the kernel lists")
    ap.add_argument("--gpu", default="H200", help="part of the hardware name (default H200)")
    ap.add_argument("--since", default="", help="only readings dated this or later (e.g. 2026-12-01)")
    goal = ap.add_mutually_exclusive_group()
    goal.add_argument("--at-most", type=float, help="a ratio target to stay at or under (a step / its floor)")
    goal.add_argument("--at-least", type=float, help="a ratio target to reach (a throughput / its floor)")
    args = ap.parse_args()
    if (args.metric is None) == (args.kernel is None):
        ap.error("give a metric or --kernel, not both")
    rows = readings(json.loads(RESULTS.read_text()), args.gpu, args.metric, args.kernel, args.bs, args.since)
    if not rows:
        raise SystemExit(f"no readings of {args.metric or args.kernel!r} on a {args.gpu}")
    for date, commit, metric, value, ratio in rows:
        print(f"{date[:16]:16} {commit:8} {value:10.4g}" + (f" {ratio:7.3f}" if ratio is not None else "")
              + (f"  {metric}" if args.kernel else ""))
    lo, mid, hi = summary([r[3] for r in rows])
    print(f"{len(rows)} readings: min {lo:.4g}, median {mid:.4g}, max {hi:.4g} ({(hi / lo - 1) * 100:.1f} % apart)")
    ratios = [r[4] for r in rows if r[4] is not None]
    if ratios:
        line = f"ratio: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, max {max(ratios):.3f}"
        if args.at_most is not None:
            line += f"; {sum(x <= args.at_most for x in ratios)} of {len(ratios)} at or under {args.at_most}"
        if args.at_least is not None:
            line += f"; {sum(x >= args.at_least for x in ratios)} of {len(ratios)} at or over {args.at_least}"
        print(line)


if __name__ == "__main__":
    main()

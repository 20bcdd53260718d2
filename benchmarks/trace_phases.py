"""Issue 18: where a served step's host time goes, from a step trace taken with MINISGL_TRACE_DETAIL=1.

    MINISGL_TRACE_DETAIL=1 python -m minisgl_edu.serve ... --trace T.json    (then load it, stop it)
    python benchmarks/trace_phases.py T.json

For decode and mixed steps apart: the median host microseconds of the step's schedule, of its launch, and of each
phase nested in the launch (trace.DETAIL's spans: assign_locations, prepare, backend.prepare, its plans, the graph's
replay, the LM head), the rest of the launch as "launch, other"; and of the "admit early" spans (Scheduler.wait).
"""
from __future__ import annotations

import collections
import json
import statistics
import sys


def phases(events: list[dict]) -> dict[str, dict[str, list[float]]]:
    """{step phase: {span name: [us per step]}}: the spans nested in each launch span summed per launch."""
    cpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu"), key=lambda e: e["ts"])
    out: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    schedule_of = {e["args"]["step"]: e["dur"] for e in cpu if e["name"] == "schedule" and "step" in e.get("args", {})}
    for i, e in enumerate(cpu):
        if e["name"] == "admit early":
            out["(wait)"]["admit early"].append(e["dur"])
        if e["name"] != "launch":
            continue
        phase, end, inner = e["args"].get("phase", "?"), e["ts"] + e["dur"], collections.Counter()
        for f in cpu[i + 1:]:
            if f["ts"] >= end:
                break
            inner[f["name"]] += f["dur"]
        row = out[phase]
        row["schedule"].append(schedule_of.get(e["args"].get("step"), 0.0))
        row["launch"].append(e["dur"])
        for name, us in inner.items():
            row[name].append(us)
        top = inner["assign_locations"] + inner["prepare"] + inner["replay"] + inner["replay_prefill"] + inner["logits"]
        row["launch, other"].append(e["dur"] - top)
    return out


def main() -> None:
    t = json.load(open(sys.argv[1]))
    for phase, row in sorted(phases(t["traceEvents"] if isinstance(t, dict) else t).items()):
        n = max(len(v) for v in row.values())
        print(f"{phase} ({n} steps): median host us")
        for name, v in row.items():
            print(f"  {name:24s} {statistics.median(v):8.1f}   (in {len(v)})")


if __name__ == "__main__":
    main()

"""Where a graph replay's time goes between its kernels (issue 16): read `profile_decode.py --timeline` spans and
split each replay's span into time with a kernel running (busy), time with none (gaps, a kernel's ramp down and the
next one's ramp up) and time with two at once (overlap: programmatic dependent launch, a second stream). Per layer,
cut between two launches of the attention kernel, and per kernel kind: its mean duration a layer, and the gap after it.

    python3 benchmarks/timeline_gaps.py SPANS.jsonl [--kernel BatchDecode]

At batch 256 the question it answers is whether the layer's small kernels cost their durations or their gaps: the
durations are what `profile_decode.py`'s kernel list sums, the gaps are in the step but in no kernel's time.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def busy_time(spans: list[tuple[str, float, float]]) -> float:
    """µs during which at least one of `spans` runs (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for _, a, b in sorted(spans, key=lambda s: s[1]):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def split(spans: list[tuple[str, float, float]], stop: float | None = None) -> dict[str, float]:
    """{'span', 'busy', 'gaps', 'overlap', 'durations'} of one run of kernels, µs, from its first start to `stop`
    (default: its last end; a layer's: the next layer's first start): span = busy + gaps, and durations = busy +
    overlap (the kernels' own times, summed, count twice where two run at once)."""
    if not spans:
        return dict(span=0.0, busy=0.0, gaps=0.0, overlap=0.0, durations=0.0)
    start = min(a for _, a, _ in spans)
    stop = max(b for _, _, b in spans) if stop is None else stop
    busy = busy_time(spans)
    durations = sum(b - a for _, a, b in spans)
    return dict(span=stop - start, busy=busy, gaps=stop - start - busy, overlap=durations - busy, durations=durations)


def layers(spans: list[tuple[str, float, float]], kernel: str) -> list[tuple[list[tuple[str, float, float]], float]]:
    """The spans cut before each launch of `kernel` (in start order): (a layer's spans, the next layer's start), from
    one attention kernel up to the next; what comes before the first and after the last (embedding, final norm, the
    head) is left out."""
    spans = sorted(spans, key=lambda s: s[1])
    at = [i for i, (name, _, _) in enumerate(spans) if kernel in name]
    return [(spans[i:j], spans[j][1]) for i, j in zip(at, at[1:])]


def short(name: str) -> str:
    """A kernel's kind for the table: the function's name without `void`, namespaces and template arguments."""
    base = name.split("(")[0].split("<")[0].replace("void ", "").strip()
    return base.split("::")[-1][:28]


def per_kind(layer_list: list[tuple[list[tuple[str, float, float]], float]]) -> list[tuple[str, float, float]]:
    """(kind, mean duration, mean gap before the next kernel starts) a layer, in the first layer's order; a gap is
    negative where the next kernel started before this one ended (overlap)."""
    dur, gap, order = defaultdict(float), defaultdict(float), []
    for layer, next_start in layer_list:
        for k, (name, a, b) in enumerate(layer):
            key = (k, short(name))
            if key not in dur:
                order.append(key)
            dur[key] += b - a
            gap[key] += (layer[k + 1][1] if k + 1 < len(layer) else next_start) - b
    n = len(layer_list)
    return [(kind, dur[k, kind] / n, gap[k, kind] / n) for k, kind in order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spans", help="profile_decode.py --timeline's JSON lines")
    ap.add_argument("--kernel", default="BatchDecode", help="the kernel that opens a layer (part of its name)")
    args = ap.parse_args()
    for line in Path(args.spans).read_text().splitlines():
        run = json.loads(line)
        spans = [tuple(s) for s in run["spans"]]
        whole, ls = split(spans), layers(spans, args.kernel)
        print(f"\n{run.get('tag', '')} bs {run.get('bs', '?')} ({run.get('hardware', '')}, {run.get('commit', '')}): "
              f"replay {whole['span']:.1f} us = busy {whole['busy']:.1f} + gaps {whole['gaps']:.1f}; "
              f"overlap {whole['overlap']:.1f}")
        if not ls:
            print(f"  no layers: no kernel named like {args.kernel!r}")
            continue
        parts = [split(layer, stop) for layer, stop in ls]
        mean = {k: sum(p[k] for p in parts) / len(parts) for k in parts[0]}
        print(f"  a layer ({len(ls)}): span {mean['span']:.1f} us = busy {mean['busy']:.1f} + gaps {mean['gaps']:.1f}; "
              f"kernels' own {mean['durations']:.1f} (overlap {mean['overlap']:.1f})")
        print(f"  {'kernel':28} {'us':>7} {'gap after':>9}")
        for kind, d, g in per_kind(ls):
            print(f"  {kind:28} {d:7.1f} {g:9.1f}")


if __name__ == "__main__":
    main()

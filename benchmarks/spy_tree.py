"""Issue 18: a py-spy raw profile (collapsed stacks) as inclusive time per function and as a call tree.

    python benchmarks/spy_tree.py SPY.txt [--root launch] [--depth 5] [--min-pct 0.5]

`py-spy record --format raw` writes one line per distinct stack, `frame;frame;...;leaf COUNT`, each frame
`function (file.py:line)`. Printed: the functions holding the most samples anywhere in their stacks (inclusive, a
function counted once per stack), then the tree below every frame named `--root` (the scheduler's `launch`: where a
step's host time goes), children by samples, to `--depth` levels, each line the share of the root's samples.
"""
from __future__ import annotations

import argparse
import collections
import os
import re


def frame_name(frame: str) -> str:
    """'prepare (minisgl_edu/engine.py:93)' -> 'prepare (engine.py)': one name per function, whatever the line."""
    m = re.match(r"(.*) \((.*?)(:\d+)?\)$", frame)
    return f"{m.group(1)} ({os.path.basename(m.group(2))})" if m else frame


def read_stacks(path: str) -> list[tuple[list[str], int]]:
    out = []
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if stack and n.isdigit():
                out.append(([frame_name(s) for s in stack.split(";")], int(n)))
    return out


def inclusive(stacks) -> collections.Counter:
    c = collections.Counter()
    for frames, n in stacks:
        for name in set(frames):
            c[name] += n
    return c


def subtree(stacks, root: str, depth: int) -> tuple[int, dict]:
    """(samples under `root`, nested {name: [samples, children]}) from each stack's first frame named `root`
    (a method's name without its class: py-spy writes `Scheduler.launch`)."""
    tree: dict = {}
    total = 0
    for frames, n in stacks:
        idx = next((i for i, f in enumerate(frames) if f.split(" (")[0].split(".")[-1] == root), None)
        if idx is None:
            continue
        total += n
        node = tree
        for f in frames[idx + 1: idx + 1 + depth]:
            entry = node.setdefault(f, [0, {}])
            entry[0] += n
            node = entry[1]
    return total, tree


def print_tree(node: dict, total: int, min_pct: float, indent: int = 0) -> None:
    for name, (n, kids) in sorted(node.items(), key=lambda kv: -kv[1][0]):
        if 100 * n / total < min_pct:
            continue
        print(f"{100 * n / total:6.1f}% {'  ' * indent}{name}")
        print_tree(kids, total, min_pct, indent + 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--root", default="launch")
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--min-pct", type=float, default=0.5)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    stacks = read_stacks(args.path)
    total = sum(n for _, n in stacks)
    print(f"{args.path}: {total} samples")
    for name, n in inclusive(stacks).most_common(args.top):
        print(f"  {100 * n / total:6.1f}%  {name}")
    under, tree = subtree(stacks, args.root, args.depth)
    print(f"\nbelow {args.root}: {under} samples ({100 * under / max(total, 1):.1f} % of all); shares of those:")
    if under:
        print_tree(tree, under, args.min_pct)


if __name__ == "__main__":
    main()

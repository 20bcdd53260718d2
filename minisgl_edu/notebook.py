"""Helpers for the notebooks (not a chapter): `header()` says which hardware, date, commit and torch
produced a notebook's outputs; the others only *display* library state (tables, the radix tree, pages).
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import torch

from .config import default_device as pick_device  # noqa: F401  ("cuda" when present: every notebook runs on both)
from .paging import cdiv


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    if os.environ.get("MINISGL_COMMIT"):  # set by scripts/gpu_env.sh: a GPU machine gets the tree, not our .git
        return os.environ["MINISGL_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def header() -> str:
    """Print (and return) the hardware, UTC date, git commit and torch version of this run."""
    hw = (f"GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
          else f"CPU {_cpu_model()} ({torch.get_num_threads()} threads)")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"hardware: {hw}\ndate:     {date}\ncommit:   {_git_commit()}\ntorch:    {torch.__version__}"
    print(text)
    return text


def show_table(rows: list[dict], title: str | None = None) -> None:
    """Print a list of dicts as an aligned text table (columns from the first row)."""
    if title:
        print(title)
    if not rows:
        print("  (empty)")
        return
    cols = list(rows[0])
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.rjust(w) for c, w in zip(cols, width)))
    for row in cells:
        print("  " + "  ".join(v.rjust(w) for v, w in zip(row, width)))


def ledger(reqs) -> list[dict]:
    """One row per request: the three lengths of chapter 2 and what follows from them."""
    return [{"uid": r.uid, "cached_len": r.cached_len, "device_len": r.device_len, "extend_len": r.extend_len,
             "max_device_len": r.max_device_len, "prompt_len": r.prompt_len, "is_chunked": r.is_chunked}
            for r in reqs]


def _short(values, limit: int = 8) -> str:
    vals = [int(v) for v in values]
    body = " ".join(map(str, vals[:limit]))
    return f"[{body}{' ...' if len(vals) > limit else ''}]"


def draw_tree(cache, decode=None, limit: int = 8) -> str:
    """Print and return a RadixCache as indented text: each node's key (token ids, or `decode(ids)`), its
    KV slots, ref count (locked when > 0) and last access tick."""
    lines = [f"root  (evictable={cache.evictable_size}, protected={cache.protected_size})"]

    def visit(node, prefix: str) -> None:
        kids = sorted(node.children.values(), key=lambda n: [int(t) for t in n.key])
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            if decode:
                text = decode([int(t) for t in child.key])
                key = repr(text if len(text) <= 6 * limit else text[: 3 * limit] + "…" + text[-3 * limit:])
            else:
                key = _short(child.key, limit)
            lock = f"ref={child.ref_count}" + (" locked" if child.ref_count else "")
            lines.append(f"{prefix}{'└── ' if last else '├── '}{key}  len={len(child.key)} "
                         f"slots={_short(child.value, limit)} {lock} t={child.last_access}")
            visit(child, prefix + ("    " if last else "│   "))

    visit(cache.root, "")
    text = "\n".join(lines)
    print(text)
    return text


def page_owners(pool, reqs=(), cache=None) -> list[str]:
    """Who holds each page of `pool`: "free", "cache", "uid N", or "" if nobody (a leak)."""
    ps = pool.page_size
    owner = [""] * pool.num_pages
    for p in pool.free_pages.tolist():
        owner[p] = "free"
    if cache is not None and getattr(cache, "root", None) is not None:
        for p in (cache.all_locations()[::ps] // ps).tolist():
            owner[p] = "cache"
    for r in (r for r in reqs if r.table_idx >= 0):
        for p in pool.pages_of(r).tolist():
            owner[p] = owner[p] or f"uid {r.uid}"
    return owner


def plot_pages(pool, reqs=(), cache=None, ax=None, title: str = ""):
    """Draw one square per page coloured by its owner (see `page_owners`); return the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    owners = page_owners(pool, reqs, cache)
    names = sorted(set(owners), key=lambda s: (s != "free", s != "cache", s))
    palette = plt.get_cmap("tab10")
    colour = {n: ("#e8e8e8" if n == "free" else "#9e9e9e" if n == "cache" else "#000000" if n == ""
                  else palette(int(n.split()[-1]) % 10)) for n in names}  # a request keeps its colour
    cols = min(32, pool.num_pages)
    rows = cdiv(pool.num_pages, cols)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.28 * cols + 1.5, 0.28 * rows + 0.6))
    for p, name in enumerate(owners):
        ax.add_patch(plt.Rectangle((p % cols, -(p // cols)), 0.9, 0.9, color=colour[name]))
    ax.set_xlim(-0.1, cols)
    ax.set_ylim(-rows + 0.9, 1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or f"{pool.num_pages} pages of {pool.page_size} slots")
    ax.legend(handles=[Patch(color=colour[n], label=n or "leaked") for n in names],
              loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return ax


def plot_tree(cache, decode=None, ax=None, title: str = "", width: int = 18):
    """Draw a RadixCache with matplotlib: one box per node (its key, length and ref count), locked
    nodes orange, evictable ones blue; leaves left to right in key order. Return the axes."""
    import matplotlib.pyplot as plt

    pos, labels, edges, locked = {}, {}, [], {}
    next_x = [0.0]

    def place(node, depth: int) -> float:
        kids = sorted(node.children.values(), key=lambda n: [int(t) for t in n.key])
        xs = [place(k, depth + 1) for k in kids]
        edges.extend((node, k) for k in kids)
        x = sum(xs) / len(xs) if xs else next_x[0]
        if not xs:
            next_x[0] += 1.0
        pos[node] = (x, -depth)
        if node is cache.root:
            labels[node], locked[node] = "root", None
        else:
            text = decode([int(t) for t in node.key]) if decode else _short(node.key, 4)
            text = text if len(text) <= width else text[: width - 1] + "…"
            labels[node] = f"{repr(text) if decode else text}\nlen={len(node.key)} ref={node.ref_count}"
            locked[node] = node.ref_count > 0
        return x

    place(cache.root, 0)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 2.6 * next_x[0]), 1.1 * (1 - min(y for _, y in pos.values())) + 0.4))
    for a, b in edges:
        ax.plot([pos[a][0], pos[b][0]], [pos[a][1], pos[b][1]], color="#888888", zorder=1)
    for node, (x, y) in pos.items():
        face = "#ffffff" if locked[node] is None else "#ffcc80" if locked[node] else "#bbdefb"
        ax.text(x, y, labels[node], ha="center", va="center", fontsize=8, zorder=2,
                bbox=dict(boxstyle="round,pad=0.3", facecolor=face, edgecolor="#555555"))
    ax.set_xlim(-0.7, max(next_x[0] - 0.3, 0.7))
    ax.set_ylim(min(y for _, y in pos.values()) - 0.6, 0.6)
    ax.axis("off")
    ax.set_title(title or f"evictable={cache.evictable_size} (blue)  protected={cache.protected_size} (orange)", fontsize=9)
    return ax

"""Draw the chapters' figures into chapters/assets/figures/ (run from the repository root, on the CPU).

    python3 scripts/draw_diagrams.py            # both kinds below
    python3 scripts/draw_diagrams.py --check    # exit 1 if a notebook figure differs from its stored output

Two kinds of figure, neither drawn by hand:
* from the library's real state: a page table and its pool after requests come and go (chapter 4), and a
  radix tree before and after insert, split, lock and evict (chapter 5), built with PagePool / RadixCache
  and drawn with the notebook helpers (`minisgl_edu.notebook.plot_pages`, `plot_tree`);
* from the committed notebooks: the plot a chapter's prose talks about, copied byte for byte out of the
  stored outputs (found by a phrase of its cell's source, so a moved cell is still found);
* from the committed H200 measurements: chapter 7's P1 breakdown, drawn from `benchmarks/results.json`'s rows of
  one `bench_gpu.py p1b nobal` run (each decode step against its own floor, by batch size), and the decode kernels'
  read rate around one wave of the grid (`benchmarks/issue16/s29/`, an H100), and P1 with kernels skipped
  (`bench_gpu.py p1 p1b free`, session 32 on an H100 and session 33 on an H200), and one layer of the batch-1 graph
  kernel by kernel, with and without programmatic dependent launch (`profile_decode.py --timeline`), and every
  reading of the batch-256 step against its target since the fused kernels (`benchmarks/spread.py`); chapter 9's inter-token
  gaps of one served trace, by the kind of step around them (`benchmarks/issue18/h200-s11/tail_qwen3-0.6b.json`), and
  what a mixed step costs by prompt length beside the served tail with two mixed budgets (`benchmarks/issue18/h200-s13/`),
  and the bench client's own share of a measured tail (`benchmarks/issue18/h200-s14/`).
"""
from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "chapters" / "assets" / "figures"

# figure name -> (notebook, a phrase of the source of the cell whose first PNG output it is)
NOTEBOOK_FIGURES = {
    "04-page-map.png": ("04_pages.ipynb", "big = PagePool(num_pages=64"),
    "05-tree.png": ("05_radix_cache.ipynb", "plot_tree(cache, decode=tok.decode)"),
    "06-timelines.png": ("06_overlap.ipynb", "def steps_ms(timeline, stats"),
    "06-trace.png": ("06_overlap.ipynb", "def decode_spans(obj"),
    "07-graph-speedup.png": ("07_kernels_and_graphs.ipynb", "bs_, eager_, graph_ = zip(*rows)"),
}


def notebook_png(notebook: str, phrase: str) -> bytes:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and phrase in "".join(cell["source"]):
            for out in cell.get("outputs", []):
                if "image/png" in out.get("data", {}):
                    return base64.b64decode(out["data"]["image/png"])
            raise ValueError(f"{notebook}: the cell with {phrase!r} has no stored PNG output")
    raise ValueError(f"{notebook}: no cell contains {phrase!r}")


def extract_notebook_figures(check: bool = False) -> list[str]:
    stale = []
    for name, (notebook, phrase) in NOTEBOOK_FIGURES.items():
        png, path = notebook_png(notebook, phrase), OUT / name
        if check:
            if not path.is_file() or path.read_bytes() != png:
                stale.append(name)
        else:
            path.write_bytes(png)
    return stale


def draw_page_table(path: Path) -> None:
    """Chapter 4: five requests in a 64-page pool of page size 4; two finish; one row drawn slot by slot."""
    import matplotlib.pyplot as plt

    from minisgl_edu.notebook import plot_pages
    from minisgl_edu.paging import PagePool
    from minisgl_edu.req import Req, SamplingParams

    pool = PagePool(num_pages=64, page_size=4, max_running_reqs=8, max_seq_len=64, device="cpu")
    reqs = [Req(uid, list(range(n)), SamplingParams(max_tokens=4)) for uid, n in enumerate((9, 30, 4, 17, 41))]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations(reqs)
    for r in reqs:
        r.complete_one()
    fig, axes = plt.subplots(3, 1, figsize=(10.5, 4.6), gridspec_kw={"height_ratios": [1, 1, 1.1]})
    plot_pages(pool, reqs, ax=axes[0], title=f"five requests admitted: {pool.num_free_pages} of 64 pages free")
    for r in (reqs[1], reqs[3]):  # requests 1 and 3 finish: their pages go back to the free list
        pool.free_tail(r, 0)
        pool.release_row(r.table_idx)
    live = [reqs[0], reqs[2], reqs[4]]
    plot_pages(pool, live, ax=axes[1], title=f"requests 1 and 3 finished: {pool.num_free_pages} pages free, in any order")
    r = reqs[0]
    row = pool.page_table[r.table_idx, :r.cached_len].tolist()
    ax = axes[2]
    for pos, loc in enumerate(row):
        ax.add_patch(plt.Rectangle((pos, 0), 0.95, 0.95, facecolor=plt.get_cmap("tab10")(r.uid), alpha=0.35))
        ax.text(pos + 0.47, 0.62, str(loc), ha="center", va="center", fontsize=9)
        ax.text(pos + 0.47, 0.22, f"p{loc // pool.page_size}", ha="center", va="center", fontsize=7, color="#333333")
        ax.text(pos + 0.47, -0.3, str(pos), ha="center", va="center", fontsize=7, color="#777777")
    ax.set_xlim(-2.2, 33)
    ax.set_ylim(-0.6, 1.2)
    ax.axis("off")
    ax.text(-0.2, 0.45, "slot\npage", ha="right", va="center", fontsize=7)
    ax.text(-0.2, -0.3, "pos", ha="right", va="center", fontsize=7, color="#777777")
    ax.set_title(f"request 0's page-table row {r.table_idx}: one slot per position "
                 f"(slot = page * 4 + pos % 4); only its first {r.cached_len} entries are valid", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def draw_radix_tree(path: Path) -> None:
    """Chapter 5: a radix tree over token ids, before and after an insert that splits, a lock, an eviction."""
    import matplotlib.pyplot as plt
    import torch

    from minisgl_edu.notebook import plot_tree
    from minisgl_edu.radix import RadixCache

    words = {1: "You", 2: " are", 3: " a", 4: " helpful", 5: " assistant.", 6: " Say", 7: " hello.",
             8: " goodbye.", 9: " pirate."}
    decode = lambda ids: "".join(words[i] for i in ids)  # a toy vocabulary: one word per token id
    cache, slot = RadixCache(page_size=1), iter(range(1000))
    insert = lambda ids: cache.insert_prefix(ids, torch.tensor([next(slot) for _ in ids]))
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    insert([1, 2, 3, 4, 5, 6, 7])
    plot_tree(cache, decode, ax=axes[0], title="1. insert 'You are a helpful assistant. Say hello.'")
    insert([1, 2, 3, 4, 5, 6, 8])
    plot_tree(cache, decode, ax=axes[1], title="2. insert '... Say goodbye.': the edge splits")
    insert([1, 2, 3, 9, 6, 7])
    node, _ = cache.match_prefix([1, 2, 3, 4, 5, 6, 7])
    cache.lock(node)
    plot_tree(cache, decode, ax=axes[2], title="3. insert 'You are a pirate. ...'; lock '... hello.'")
    freed = cache.evict(100)
    plot_tree(cache, decode, ax=axes[3], title=f"4. evict(100): {len(freed)} unlocked tokens freed")
    for ax in axes:
        ax.title.set_fontsize(8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


P1B_COMMIT = "d9cc2c1"  # the run chapter 7 quotes: the balanced default and its twin (nobal) in one process


def rows_of(commit: str) -> list[dict]:
    """results.json's rows measured at `commit`, in order."""
    return [r for r in json.loads((ROOT / "benchmarks" / "results.json").read_text()) if r["commit"] == commit]


def p1b_bins(commit: str = P1B_COMMIT) -> dict[str, list[tuple[str, float, float]]]:
    """{"balanced" | "cuda-core": [(batch-size bin, GPU / floor in P1, a uniform batch's GPU / floor), ...]} from
    results.json's p1b rows of that commit (the uniform twin's ratio is in each row's note)."""
    import re
    out: dict[str, list[tuple[str, float, float]]] = {"balanced": [], "cuda-core": []}
    for r in rows_of(commit):
        m = re.fullmatch(r"p1b(_nobal)?_decode_bs(\d+)_(\d+)", r["metric"])
        if m:
            uniform = float(re.search(r": ([\d.]+) x its floor", r["note"]).group(1))
            out["cuda-core" if m.group(1) else "balanced"].append((f"{m.group(2)}-{m.group(3)}", r["value"], uniform))
    return out


def draw_p1_breakdown(path: Path) -> None:
    """Chapter 7: P1's decode steps against their own floors by batch size, both kernels, beside uniform batches."""
    import matplotlib.pyplot as plt
    import numpy as np

    bins = p1b_bins()
    labels = [b for b, _, _ in bins["cuda-core"]]
    x, w = np.arange(len(labels)), 0.27
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    ax.bar(x - w, [u for _, _, u in bins["cuda-core"]], w, label="a uniform batch (CUDA-core kernel)", color="#bbbbbb")
    ax.bar(x, [v for _, v, _ in bins["cuda-core"]], w, label="P1, CUDA-core kernel always (nobal)", color="#4c72b0")
    ax.bar(x + w, [v for _, v, _ in bins["balanced"]], w, label="P1, balanced decode (default)", color="#dd8452")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_xlabel("requests in the decode step")
    ax.set_ylabel("GPU time / memory floor")
    ax.set_title(f"P1's decode steps against their own floors (H200, Qwen3-0.6B, commit {P1B_COMMIT})", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


TAIL = ROOT / "benchmarks" / "issue18" / "h200-s11" / "tail_qwen3-0.6b.json"  # tail.py --dump of one serve --trace
TAIL_KINDS = {"decode/next decode": ("a decode step, then a decode step", "#bbbbbb"),
              "decode/next mixed": ("a decode step, then a mixed step (its tokens wait for that launch)", "#4c72b0"),
              "mixed/next decode": ("a mixed step (its own GPU time)", "#dd8452"),
              "mixed/next mixed": ("a mixed step, then a mixed step", "#c44e52")}


def draw_itl_tail(path: Path, src: Path = TAIL) -> None:
    """Chapter 9: every token's wait since its request's previous token (server side: one step's emission to the
    next), stacked by the kind of step that ends it, beside the target (twice the median decode step)."""
    import matplotlib.pyplot as plt
    import numpy as np

    data = json.loads(src.read_text())
    iv = np.array([x for x, _, _ in data["intervals"]])
    w = np.array([n for _, n, _ in data["intervals"]], float)
    lab = np.array([k for _, _, k in data["intervals"]])
    order = np.argsort(iv)
    p99 = iv[order][np.searchsorted(np.cumsum(w[order]) / w.sum(), 0.99)]
    step = data["median_decode_forward_ms"]
    edges = np.arange(1.0, 6.01, 0.1)
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    bottom = np.zeros(len(edges) - 1)
    for kind, (name, color) in TAIL_KINDS.items():
        h, _ = np.histogram(np.clip(iv[lab == kind], edges[0], edges[-1] - 1e-9), edges, weights=w[lab == kind])
        ax.bar(edges[:-1], h / w.sum(), 0.1, bottom=bottom, align="edge", color=color, label=name)
        bottom += h / w.sum()
    ax.set_yscale("log")
    ax.set_ylim(top=8)  # room above the bars for the legend
    ax.axvline(2 * step, color="black", lw=1, ls="--")
    lo = ax.get_ylim()[0]
    ax.text(2 * step, lo * 3, f" 2 x the median decode step's\n device span ({2 * step:.2f} ms)", fontsize=8)
    ax.axvline(p99, color="#c44e52", lw=1)
    ax.text(p99, 0.03, f"p99 {p99:.2f} ms ", fontsize=8, color="#c44e52", ha="right")
    ax.set_xlabel("interval between two of a request's tokens, at the server (ms; the last bin holds the rest)")
    ax.set_ylabel("share of tokens")
    ax.set_title("Qwen3-0.6B served at 21.5 req/s on the H200 (serve --trace, commit 41d4316)", fontsize=9)
    ax.legend(fontsize=7.5, frameon=False, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


S13 = ROOT / "benchmarks" / "issue18" / "h200-s13"  # session 13: mixed_cost.py's tables, tail.py dumps of two servers


def draw_mixed_budget(path: Path, src: Path = S13) -> None:
    """Chapter 9: left, one mixed step's device time over the decode step it replaces, by prompt length (whole prompts,
    16/32/64 requests decoding, both models); right, the served Qwen3 tail with the full budget and with 509 tokens:
    the share of tokens that waited longer than x, against the target (twice the median decode step)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, color in (("qwen3-0.6b", "#dd8452"), ("smollm2-135m", "#4c72b0")):
        t = json.loads((src / f"mixed_cost_{name}.json").read_text())
        for row, style in zip(t["rows"], (":", "-", "--")):
            ax.plot(t["lens"], np.array(row["mixed_ms"]) / row["decode_ms"], style, color=color, marker="o", ms=3,
                    label=f"{name.split('-')[0]}, {row['decode_bs']} decoding ({row['decode_ms']:.2f} ms)")
    ax.axhline(2, color="black", lw=1, ls="--")
    ax.axvline(509, color="#888888", lw=0.8)
    ax.text(515, 1.05, "509: Qwen3's default", fontsize=7.5, color="#555555")
    ax.set_xlabel("prompt tokens in the mixed step")
    ax.set_ylabel("mixed step / decode step (device)")
    ax.set_ylim(1.0, 2.4)
    ax.legend(fontsize=6.5, frameon=False, loc="upper left")
    ax.set_title("what a prompt adds to a step (H200)", fontsize=9)
    for name, label, color in (("full", "full budget (16,384)", "#c44e52"), ("b509", "509 tokens (the default)", "#55a868")):
        data = json.loads((src / f"tail_qwen3_{name}.json").read_text())
        iv = np.array([x for x, _, _ in data["intervals"]])
        w = np.array([n for _, n, _ in data["intervals"]], float)
        order = np.argsort(iv)
        share = 1 - np.cumsum(w[order]) / w.sum()  # tokens that waited longer than iv[order]
        bx.step(iv[order], np.maximum(share, 1e-5), where="post", color=color, label=label)
        step = data["median_decode_forward_ms"]
    bx.axhline(0.01, color="#888888", lw=0.8)
    bx.text(1.05, 0.012, "p99", fontsize=7.5, color="#555555")
    bx.axvline(2 * step, color="black", lw=1, ls="--")
    bx.text(2 * step, 0.3, f" 2 x the median\n decode step ({2 * step:.2f} ms)", fontsize=7.5)
    bx.set_yscale("log")
    bx.set_xlim(1.0, 6.0)
    bx.set_ylim(1e-4, 1.5)
    bx.set_xlabel("interval between two of a request's tokens, at the server (ms)")
    bx.set_ylabel("share of tokens that waited longer")
    bx.legend(fontsize=7.5, frameon=False, loc="lower left")
    bx.set_title("Qwen3-0.6B served at 21.5 req/s (serve --trace, commit 1988412)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


S14 = ROOT / "benchmarks" / "issue18" / "h200-s14"  # session 14: client_jitter.py and ab_serve.py --one-server


def draw_client_share(path: Path, src: Path = S14) -> None:
    """Chapter 9: left, the bench client's ITL p99 above an exact 1.4 ms cadence on 40 streams, by client (one event
    loop, asyncio or uvloop; the load shared by 2 or 4 processes); right, one server under the same paired loads read by
    one client process and by four, ITL p99 over the median decode step, pair by pair (SmolLM2 at 42 req/s)."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.4))
    runs = json.loads((src / "client_jitter.json").read_text())["runs"]
    kinds = [("asyncio", 1, "one loop (asyncio)"), ("uvloop", 1, "one loop (uvloop)"), ("asyncio", 2, "2 processes"),
             ("asyncio", 4, "4 processes")]
    for x, (loop, procs, _) in enumerate(kinds):
        ys = [r["itl_ms"]["p99"] - 1.4 for r in runs if r["loop"] == loop and r["procs"] == procs]
        ax.plot([x] * len(ys), ys, "o", color="#4c72b0", ms=5, alpha=0.8)
    ax.set_xticks(range(len(kinds)), [k[2] for k in kinds], fontsize=8)
    ax.set_xlim(-0.5, len(kinds) - 0.5)
    ax.set_ylim(0, 0.6)
    ax.set_ylabel("client's ITL p99 - the true 1.4 ms (ms)")
    ax.set_title("the client's own error: a stand-in with an exact cadence (H200 host)", fontsize=9)
    labelled = set()
    for name, style in (("ab_client_smollm2-135m.json", "-"), ("ab_client2_smollm2-135m.json", "--")):
        pairs: dict[int, dict[str, float]] = {}
        for r in json.loads((src / name).read_text())["runs"]:
            pairs.setdefault(r["seed"], {})[r["variant"]] = r["ratio"]
        for p in pairs.values():
            lower = p["B"] < p["A"]
            label = "lower with four" if lower else "higher with four"
            bx.plot([0, 1], [p["A"], p["B"]], style, marker="o", color="#55a868" if lower else "#c44e52", ms=4, lw=1.2,
                    label=None if label in labelled else label)
            labelled.add(label)
    bx.axhline(2, color="black", lw=1, ls="--")
    bx.text(1.02, 2.0, "target", fontsize=7.5, va="center")
    bx.set_xticks([0, 1], ["one client process", "four client processes"], fontsize=8)
    bx.set_xlim(-0.3, 1.3)
    bx.set_ylabel("ITL p99 / median decode step")
    bx.set_title("SmolLM2 at 42 req/s, one line per paired load\n(solid: call 1, dashed: call 3)", fontsize=8.5)
    bx.legend(fontsize=7.5, frameon=False, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


S22 = ROOT / "benchmarks" / "issue18" / "h200-s22"  # session 22: the client timed by each read's arrival


def draw_arrival_clock(path: Path, src: Path = S22) -> None:
    """Chapter 9: left, the bench client's ITL p99 above an exact 1.4 ms cadence, each run timed twice (by the read,
    by the kernel's arrival stamp); right, served runs at the half-peak rate, ITL p99 / median decode step by both."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for call, marker in (("call1", "s"), ("call2", "o")):
        runs = json.loads((src / call / "client_jitter.json").read_text())["runs"]
        for x, procs in enumerate((1, 4)):
            for r in (r for r in runs if r["procs"] == procs):
                read, arrival = r["itl_read_ms"]["p99"] - 1.4, r["itl_ms"]["p99"] - 1.4
                ax.plot([2 * x, 2 * x + 0.8], [read, arrival], "-", marker=marker, color="#8c8c8c", ms=4, lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks([0, 0.8, 2, 2.8], ["1 process:\nread time", "arrival", "4 processes:\nread time", "arrival"],
                  fontsize=8)
    ax.set_ylabel("client's ITL p99 - the true 1.4 ms (ms)")
    ax.set_title("a stand-in with an exact cadence, 40 streams (H200 hosts)\nsquares: a busy host (call 1), "
                 "circles: call 2", fontsize=8.5)
    lo, hi = 1.8, 3.1
    for call in ("call1", "call2"):
        models = json.loads((src / call / "gpu_serve.json").read_text())["models"]
        for model, color in (("smollm2-135m", "#4c72b0"), ("qwen3-0.6b", "#dd8452")):
            for s in models.get(model, {}).get("sweep", []):
                step = s["step_median_ms"]["decode"]
                bx.plot(s["itl_read_ms"]["p99"] / step, s["itl_ms"]["p99"] / step, "o", color=color, ms=5, alpha=0.85,
                        label=model if call == "call2" and s is models[model]["sweep"][0] else None)
    bx.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    bx.axhline(2, color="black", lw=1, ls="--")
    bx.axvline(2, color="black", lw=1, ls="--")
    bx.set_xlim(lo, hi)
    bx.set_ylim(lo, hi)
    bx.set_xlabel("ITL p99 / median decode step, by read time", fontsize=8.5)
    bx.set_ylabel("... by arrival (kernel stamps)", fontsize=8.5)
    bx.set_title("served at half the peak rate, one point per run\n(H200, commits 363b5fd and b3da0c0)", fontsize=8.5)
    bx.legend(fontsize=7.5, frameon=False, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


S23 = ROOT / "benchmarks" / "issue18" / "h200-s23"  # session 23: a slow token's legs, and the relay's hops


def draw_token_legs(path: Path, src: Path = S23) -> None:
    """Chapter 9: left, each served run's client ITL p99 cut into its legs (the median decode step, the steps' own
    tail to their p99, the loop around the step, the relay to the API, the API's writes and the client); right, the
    relay's three hops per step (median and p99) from /metrics' reply hops."""
    import matplotlib.pyplot as plt

    rows = []
    for s in json.loads((src / "call1" / "gpu_serve.json").read_text())["models"]["smollm2-135m"]["sweep"]:
        rows.append(("1", s["step_median_ms"]["decode"], s["step_p99_ms"], s["emit_p99_ms"], s["api_itl_p99_ms"],
                     s["itl_ms"]["p99"]))
    for call, name in (("call2", "ab_direct.json"), ("call3", "ab_spin.json")):
        for r in json.loads((src / call / name).read_text())["runs"]:
            if r["variant"] == "A":  # the defaults
                rows.append((call[-1], r["decode_median"], r["step_p99"], r["emit_p99"], r["api_itl_p99"], r["itl_p99"]))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 3.9), gridspec_kw={"width_ratios": [1.6, 1]})
    legs = [("median decode step", "#c8c8c8"), ("steps' tail (step p99)", "#4c72b0"), ("loop (emission p99)", "#55a868"),
            ("relay (API receive p99)", "#dd8452"), ("writes + client (client p99)", "#8172b3")]
    for y, (call, med, step, emit, api, client) in enumerate(rows):
        left = 0.0
        for (label, color), edge in zip(legs, (med, step, emit, api, client)):
            width = max(edge - left, 0.0)  # a leg that came out negative (p99s are not additive) is drawn empty
            ax.barh(y, width, left=left, color=color, label=label if y == 0 else None, height=0.7)
            left = max(left, edge)
        ax.plot([2 * med] * 2, [y - 0.4, y + 0.4], color="black", lw=1.2)
    ax.set_yticks(range(len(rows)), [f"call {r[0]}" for r in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel("ms (black tick: 2 x the median decode step, the target for the client's ITL p99)", fontsize=8)
    ax.set_title("SmolLM2 served at half the peak rate (H200): a slow token's legs at p99, one bar per run", fontsize=8.5)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    hops = [r["hop_ms"] for r in json.loads((src / "call3" / "ab_spin.json").read_text())["runs"] if r["variant"] == "A"]
    names = list(hops[0])
    for x, h in enumerate(names):
        bx.plot([x - 0.1] * len(hops), [r[h]["median"] for r in hops], "o", color="#8c8c8c", ms=5,
                label="median" if x == 0 else None)
        bx.plot([x + 0.1] * len(hops), [r[h]["p99"] for r in hops], "o", color="#c44e52", ms=5,
                label="p99" if x == 0 else None)
    bx.set_xticks(range(len(names)), [n.replace("_to_", " ->\n") for n in names], fontsize=7.5)
    bx.set_ylim(0, None)
    bx.set_ylabel("ms per step", fontsize=8)
    bx.set_title("the relay hop by hop (minisgl:reply_hop_seconds),\nfour runs at 40 req/s (call 3)", fontsize=8.5)
    bx.legend(fontsize=7.5, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


WAVE = ROOT / "benchmarks" / "issue16" / "s29" / "call2_attn_h100.json"  # lt_probe.py --attn, session 29 call 2


def draw_decode_wave(path: Path, src: Path = WAVE) -> None:
    """Chapter 7: the decode kernels' K/V read rate by requests, even and uneven contexts, around one wave of the
    CUDA-core kernel's grid (where its graph plan stops splitting keys)."""
    import matplotlib.pyplot as plt

    rows = json.loads(src.read_text())["attn"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, spread, where in zip(axes, ("even", "uneven"), ((0.60, 0.06), (0.40, 0.92))):
        sel = [r for r in rows if r["contexts"] == spread]
        bs = [r["bs"] for r in sel]
        for key, label, color in (("graph_plan_us", "CUDA-core kernel (graph plan)", "#4c72b0"),
                                  ("tensor_core_us", "tensor-core kernel (balanced)", "#dd8452")):
            ax.plot(bs, [r["kv_gb"] / r[key] * 1e3 for r in sel], "o-", ms=4, label=label, color=color)
        wave = max(r["plan_info_graph"][0] for r in sel if r["plan_info_graph"][9])  # a split plan's padded size
        ax.axvline(wave + 0.5, color="black", lw=0.8, ls="--")
        ax.text(*where, f"one wave: {wave} requests (dashed)", fontsize=8, transform=ax.transAxes)
        ax.set_title(f"{spread} contexts", fontsize=9)
        ax.set_xlabel("requests in the decode step")
    axes[0].set_ylabel("K/V read, TB/s")
    axes[1].legend(fontsize=8, frameon=False, loc="lower right")
    fig.suptitle("Decode attention past one wave (H100, Qwen3-0.6B's heads, 28 layers' K/V; lt_probe.py --attn)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


FREE_COMMITS = ("e4f449f", "5e7239a")  # bench_gpu.py p1 p1b free: session 32 (an H100), session 33 (an H200)
FREE_TAGS = {"": ("the engine as it is", "#4c72b0"), "_free_small": ("small kernels skipped", "#dd8452"),
             "_free_products": ("products skipped", "#55a868"), "_free_both": ("both skipped", "#bbbbbb")}


def free_bounds(commit: str) -> tuple[str, dict[str, float], dict[str, list[tuple[str, float]]]]:
    """(hardware, {tag: P1's share of the floor}, {tag: [(batch-size bin, decode GPU / floor), ...]}) from
    results.json's rows of one `bench_gpu.py p1 p1b free` run at `commit`."""
    import re
    rows = [r for r in rows_of(commit) if "free" in r["command"].split()]
    p1, bins = {}, {}
    for r in rows:
        if m := re.fullmatch(r"p1(_free_\w+?)?_offline_throughput", r["metric"]):
            p1[m.group(1) or ""] = r["ratio"]
        if m := re.fullmatch(r"p1b(_free_\w+?)?_decode_bs(\d+)_(\d+)", r["metric"]):
            bins.setdefault(m.group(1) or "", []).append((f"{m.group(2)}-{m.group(3)}", r["value"]))
    return rows[0]["hardware"], p1, bins


def draw_free_bounds(path: Path, commits: tuple[str, ...] = FREE_COMMITS) -> None:
    """Chapter 7: P1's decode steps against their floors by batch size with the small kernels, the products or both
    skipped (bounds on what fusing them could save), P1's share of the floor in the legend; one panel a GPU."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(commits), figsize=(11, 3.6), sharey=True)
    for ax, commit in zip(np.atleast_1d(axes), commits):
        hw, p1, bins = free_bounds(commit)
        labels = [b for b, _ in bins[""]]
        x, w = np.arange(len(labels)), 0.2
        for i, (tag, (label, color)) in enumerate(FREE_TAGS.items()):
            ax.bar(x + (i - 1.5) * w, [v for _, v in bins[tag]], w, color=color, label=f"{label}: P1 {p1[tag]:.2f}")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(x, labels)
        ax.set_xlabel("requests in the decode step")
        ax.set_title(f"{hw.replace('NVIDIA ', '')}, commit {commit}", fontsize=9)
        ax.legend(fontsize=7.5, frameon=False, title="P1's share of its floor", title_fontsize=7.5)
    np.atleast_1d(axes)[0].set_ylabel("GPU time / memory floor")
    fig.suptitle("P1's decode steps with kernels skipped (Qwen3-0.6B, dummy weights; bench_gpu.py p1 p1b free)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


PDL_TIMELINE = ROOT / "benchmarks" / "issue16" / "s33" / "pdl_timeline_h100_58a0cd6.jsonl"  # profile_decode.py --timeline
PDL_NAMES = [("BatchDecode", "attention", "#bbbbbb"), ("MergeStates", "merge", "#bbbbbb"), ("nvjet", "o_proj (cuBLAS)", "#8c8c8c"),
             ("norm_gemv", "norm + product", "#4c72b0"), ("silu_gemv", "SiLU·mul + down", "#4c72b0"),
             ("qk_norm_rope", "q/k", "#dd8452")]


def draw_pdl_timeline(path: Path, src: Path = PDL_TIMELINE, layer: int = 14) -> None:
    """Chapter 7: one decoder layer of the batch-1 graph replay, every kernel from its start to its end, with our
    GEMVs launched plainly and with programmatic dependent launch (profile_decode.py --timeline, first run of each)."""
    import matplotlib.pyplot as plt

    runs = {}
    for line in src.read_text().splitlines():
        r = json.loads(line)
        runs.setdefault(r["tag"], r)  # the first run of each
    fig, ax = plt.subplots(figsize=(9, 3.1))
    rows = [("nopdl", "plain launches"), ("pdl", "programmatic\ndependent launch")]
    for y, (tag, label) in enumerate(rows):
        spans = runs[tag]["spans"]
        att = [i for i, s in enumerate(spans) if "BatchDecode" in s[0]]
        t0 = spans[att[layer]][1]
        for k, (name, a, b) in enumerate(spans[att[layer]:att[layer + 1] + 1]):
            short, color = next(((s, c) for key, s, c in PDL_NAMES if key in name), (name[:12], "#cccccc"))
            yy = y + (0.18 if k % 2 else -0.18)  # alternate heights: an overlap shows as two bars side by side in time
            ax.barh(yy, b - a, left=a - t0, height=0.32, color=color, edgecolor="black", lw=0.5)
            if k < att[layer + 1] - att[layer]:
                ax.text((a + b) / 2 - t0, yy, short, ha="center", va="center", fontsize=6.5, color="white" if color != "#bbbbbb" else "black")
        end = spans[att[layer + 1]][1] - t0
        ax.axvline(end, ymin=(y + 0.05) / 2, ymax=(y + 0.95) / 2, color="crimson", lw=1.2)
        ax.text(end + 0.3, y + 0.36, f"next layer at {end:.1f} µs", fontsize=7, color="crimson")
    ax.set_yticks(range(len(rows)), [label for _, label in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("µs from the layer's attention kernel")
    hw = runs["pdl"].get("hardware", "").replace("NVIDIA ", "")
    ax.set_title(f"One layer of the batch-1 decode graph, kernel by kernel\n({hw}, Qwen3-0.6B, commit "
                 f"{runs['pdl'].get('commit', '')}, profile_decode.py --timeline)", fontsize=8.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


SPREAD_SINCE = "2026-12-01"  # the fused kernels onwards (benchmarks/spread.py)
SPREAD_SERIES = [("H200", "p2_decode_step_bs256_graph", "H200\ndecode step", "#4c72b0"),
                 ("H200", "p2_graph_replay_only_bs256", "H200\nits replay alone", "#8fb0dc"),
                 ("H100", "p2_decode_step_bs256_graph", "H100\ndecode step", "#8c8c8c")]


def draw_target_spread(path: Path, since: str = SPREAD_SINCE, target: float = 1.2) -> None:
    """Chapter 7: every reading of the batch-256 decode step against its floor since `since` (benchmarks/spread.py's
    rows), one column a GPU and figure, the target as a line and each column's median as a tick."""
    import importlib.util
    import statistics

    import matplotlib.pyplot as plt
    import numpy as np

    spec = importlib.util.spec_from_file_location("spread", ROOT / "benchmarks" / "spread.py")
    spread = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spread)
    rows = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    rng = np.random.default_rng(0)  # the same jitter every time: the figure is redrawn byte for byte
    for x, (gpu, metric, label, color) in enumerate(SPREAD_SERIES):
        ratios = [r for *_, r in spread.readings(rows, gpu, metric, since=since) if r is not None]
        ax.scatter(x + rng.uniform(-0.18, 0.18, len(ratios)), ratios, s=22, color=color, edgecolor="black", lw=0.4,
                   zorder=3)
        med = statistics.median(ratios)
        ax.plot([x - 0.28, x + 0.28], [med, med], color="black", lw=1.2)
        met = sum(v <= target for v in ratios)
        ax.text(x + 0.3, med, f"median {med:.3f}\n{met} of {len(ratios)} met", fontsize=7, va="center")
    ax.axhline(target, color="crimson", lw=1, ls="--")
    ax.text(-0.45, target + 0.004, f"target {target}x", color="crimson", fontsize=7.5)
    ax.set_xticks(range(len(SPREAD_SERIES)), [label for *_, label, _ in SPREAD_SERIES], fontsize=8)
    ax.set_xlim(-0.5, len(SPREAD_SERIES) - 0.2)
    ax.set_ylabel("time / memory floor")
    ax.set_title(f"Batch 256, Qwen3-0.6B: every reading since {since} (benchmarks/spread.py)", fontsize=8.5)
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    if "--check" in argv:
        stale = extract_notebook_figures(check=True)
        for name in stale:
            print(f"{name} differs from its notebook's stored output: run python3 scripts/draw_diagrams.py")
        return 1 if stale else 0
    import matplotlib
    matplotlib.use("Agg")
    extract_notebook_figures()
    draw_page_table(OUT / "04-page-table.png")
    draw_radix_tree(OUT / "05-insert-split-evict.png")
    draw_p1_breakdown(OUT / "07-p1-breakdown.png")
    draw_decode_wave(OUT / "07-decode-wave.png")
    draw_free_bounds(OUT / "07-free-bounds.png")
    draw_pdl_timeline(OUT / "07-pdl-timeline.png")
    draw_target_spread(OUT / "07-target-spread.png")
    draw_itl_tail(OUT / "09-itl-tail.png")
    draw_mixed_budget(OUT / "09-mixed-budget.png")
    draw_client_share(OUT / "09-client-share.png")
    draw_arrival_clock(OUT / "09-arrival-clock.png")
    draw_token_legs(OUT / "09-token-legs.png")
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("*.png"))))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))

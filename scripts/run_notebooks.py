"""Execute notebooks in place of copies and report each one's time (used by scripts/gpu_notebooks.sh).

    python3 scripts/run_notebooks.py OUTDIR [NOTEBOOK ...]      (default: notebooks/*.ipynb)

Each notebook runs in its own kernel with `notebooks/` as working directory (so `from solutions import
chNN` works) and is written to OUTDIR under its own name, also when a cell fails, so the error is
visible. Notebooks that time things (06, 07) run alone, after the others, which run a few at a time.
Exit status 1 if any notebook failed.
"""
from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMED = ("06_", "07_")  # their outputs are timings: nothing else may run beside them


def merge_streams(nb) -> None:
    """Join neighbouring pieces of one stream and keep only what a terminal would show after each '\\r'
    (a progress bar is stored as its last state, not as one output per update)."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if out.output_type == "stream" and prev is not None and prev.output_type == "stream" \
                    and prev.name == out.name:
                prev.text += out.text
            else:
                merged.append(out)
        for out in merged:
            if out.output_type == "stream":
                out.text = re.sub(r"[^\n]*\r(?!\n)", "", out.text)
        if "outputs" in cell:
            cell.outputs = merged


def execute(src: Path, outdir: Path) -> tuple[str, float, str]:
    nb = nbformat.read(src, as_version=4)
    t = time.time()
    error = ""
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(src.parent)}}).execute()
    except Exception as e:  # noqa: BLE001 - report every failure, keep going with the others
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    merge_streams(nb)
    nbformat.write(nb, outdir / src.name)
    return src.name, time.time() - t, error


def main() -> int:
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in sys.argv[2:]] or sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb"))
    shared = [p for p in paths if not p.name.startswith(TIMED)]
    alone = [p for p in paths if p.name.startswith(TIMED)]
    results = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        for name, secs, err in pool.map(lambda p: execute(p, outdir), shared):
            print(f"{name}: {secs:5.0f} s {'FAILED ' + err if err else 'ok'}", flush=True)
            results.append(err)
    for p in alone:
        name, secs, err = execute(p, outdir)
        print(f"{name}: {secs:5.0f} s {'FAILED ' + err if err else 'ok'}", flush=True)
        results.append(err)
    return 1 if any(results) else 0


if __name__ == "__main__":
    sys.exit(main())

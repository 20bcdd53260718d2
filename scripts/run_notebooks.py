"""Execute notebooks in place of copies and report each one's time (used by scripts/gpu_notebooks.sh).

    python3 scripts/run_notebooks.py OUTDIR [NOTEBOOK ...]      (default: notebooks/*.ipynb)

Each notebook runs in its own kernel with `notebooks/` as working directory (so `from solutions import
chNN` works) and is written to OUTDIR under its own name, also when a cell fails, so the error is
visible. One at a time: several notebooks print timings, and nothing else should share the machine.
Exit status 1 if any notebook failed.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


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
        NotebookClient(nb, timeout=300, kernel_name="python3",
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
    failed = 0
    for path in paths:
        name, secs, err = execute(path, outdir)
        print(f"{name}: {secs:5.0f} s {'FAILED ' + err if err else 'ok'}", flush=True)
        failed += bool(err)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

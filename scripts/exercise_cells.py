"""Execute a notebook on this machine and store the new outputs of its exercise cells only.

    python scripts/exercise_cells.py notebooks/03_prefill_budget.ipynb [...]

The notebooks keep the outputs they were committed with (the hardware their first cell names); the
exercise cells (build_cell / verdict) print the same on any machine, so only their outputs are
replaced, from a full run of a copy of the notebook here (which fails loudly if any cell fails).
"""
from __future__ import annotations

import copy
import os
import sys

import nbformat
from nbclient import NotebookClient


def is_exercise_cell(cell) -> bool:
    return cell.cell_type == "code" and ("build_cell(" in cell.source or "verdict(" in cell.source)


def refresh(path: str) -> None:
    nb = nbformat.read(path, as_version=4)
    run = copy.deepcopy(nb)
    NotebookClient(run, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    n = 0
    for mine, ran in zip(nb.cells, run.cells):
        if is_exercise_cell(mine):
            mine.outputs, mine.execution_count = ran.outputs, ran.execution_count
            n += 1
    nbformat.write(nb, path)
    print(f"{path}: {n} exercise cells refreshed", flush=True)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        refresh(p)

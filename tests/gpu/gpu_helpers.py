"""Shared bits of the GPU tests."""
from __future__ import annotations

import json
import os
import pathlib

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "configs"


def report(**fields) -> None:
    """Append one measured check to $MINISGL_GPU_REPORT (jsonl) so the suite can quote it."""
    path = os.environ.get("MINISGL_GPU_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")

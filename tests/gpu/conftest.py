"""GPU tests: marked `gpu`, skipped on a machine without CUDA (CI). scripts/gpu_suite.sh runs them on the H200."""
from __future__ import annotations

import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device (run scripts/gpu_suite.sh on a GPU machine)")
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)

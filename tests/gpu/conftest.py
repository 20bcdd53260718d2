"""GPU tests: marked `gpu`, skipped on a machine without CUDA (CI). scripts/gpu_suite.sh runs them on the H200."""
from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from minisgl_edu.graphs import gc_paused

HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device (run scripts/gpu_suite.sh on a GPU machine)")
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def device_faults_reported_in_their_own_test():
    """A kernel's fault surfaces at the next call that waits for the device, which may be the next test's: wait at
    the end of every test, so a fault fails the test that launched it (as an error in its teardown)."""
    yield
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After a fault the CUDA context is dead, and the cycle collector's next destruction of a CUDA graph ends the
    process (a C++ terminate) before pytest's summary: no collection while the report is made, and a failure is
    written out at once."""
    with gc_paused(collect=False):
        outcome = yield
        rep = outcome.get_result()
        if rep.failed:
            sys.stderr.write(f"\n=== {rep.nodeid} failed in {rep.when}:\n{rep.longreprtext[-4000:]}\n")
            sys.stderr.flush()

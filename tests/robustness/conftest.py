"""Robustness suite fixtures: a real server (`python -m minisgl_edu.serve`) per test module.

Each server runs in its own process group on a free 127.0.0.1 port. Teardown stops the launcher
(SIGTERM), then kills whatever is left of its group, and fails the test module if any process of
its tree survives. Longer soak variants (marked `slow`) run with MINISGL_SOAK=1: an environment
variable, because a conftest below the rootdir cannot add a command-line option when the suite is
collected from `tests/`.
"""
from __future__ import annotations

import os
import signal

import pytest

from serverproc import SMALL, SOAK, Server, start_server


def pytest_collection_modifyitems(config, items):
    """Skip this folder's `slow` (soak) tests unless MINISGL_SOAK=1 (or a --run-slow option exists and is set)."""
    try:
        run_slow = SOAK or bool(config.getoption("--run-slow"))
    except ValueError:  # no such option registered
        run_slow = SOAK
    if run_slow:
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason="soak variant: set MINISGL_SOAK=1")
    for item in items:
        if "slow" in item.keywords and str(item.path).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, request) -> str:
    """A tiny random-weight Llama (the default model's vocabulary, tokenizer and chat template): the server's code is
    the real one at a few seconds of CI. Its context: the test module's TINY_CONTEXT (default 2048)."""
    from minisgl_edu.default_model import default_model_path
    from tiny_model import tiny_model_dir
    return tiny_model_dir(str(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])), vocab=49152,
                          max_positions=getattr(request.module, "TINY_CONTEXT", 2048), tokenizer_from=default_model_path())


@pytest.fixture(scope="module")
def make_server(tmp_path_factory):
    """make_server(*args, api_key=None) -> a started Server; all of them are stopped at module teardown."""
    started: list[Server] = []
    tmp = str(tmp_path_factory.mktemp("servers"))

    def make(*args: str, **kw) -> Server:
        s = start_server(tmp, *args, **kw)
        started.append(s)
        return s

    yield make
    leaks = {}
    for s in started:
        s.stop()
        if left := s.survivors():
            leaks[s.port] = left
            for pid in left:  # clean up anyway, then fail
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert not leaks, f"processes survived their server: {leaks}"


@pytest.fixture(scope="module")
def server(make_server) -> Server:
    """The default model on the CPU, one per test module."""
    return make_server(*SMALL)

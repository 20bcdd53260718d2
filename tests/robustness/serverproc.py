"""Robustness suite helpers: start `python -m minisgl_edu.serve` as a real process group and watch it.

(A module of its own, not conftest.py: `tests/conftest.py` already owns the module name `conftest`.)
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
import psutil

from minisgl_edu.bench_serve import free_port

SOAK = os.environ.get("MINISGL_SOAK") == "1"  # longer soak variants
STARTUP_TIMEOUT = 300.0  # a loaded two-core machine loads the default model slowly
# small settings shared by the modules' default servers: short context, modest pool
SMALL = ("--max-running-reqs", "64", "--context-length", "1024", "--max-total-tokens", "16384")


def tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that are still alive."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@dataclass
class Server:
    """One running `python -m minisgl_edu.serve` (its launcher is `proc`, leader of its own group)."""
    proc: subprocess.Popen
    port: int
    log_path: str
    api_key: str | None = None
    known: set[int] = field(default_factory=set)  # every pid of its tree we have seen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kw) -> httpx.Client:
        kw.setdefault("timeout", 120)
        return httpx.Client(base_url=self.url, headers=self.headers, **kw)

    def procs(self) -> list[psutil.Process]:
        ps = tree(self.proc.pid)
        self.known |= {p.pid for p in ps}
        return ps

    def workers(self) -> dict[str, psutil.Process]:
        """Worker processes by role ('scheduler-rank0', 'tokenizer-0', 'detokenizer', ...), from /health."""
        pids = httpx.get(self.url + "/health", timeout=10).json()["workers"]
        self.procs()
        return {name: psutil.Process(pid) for name, pid in pids.items()}

    def rss(self) -> int:
        """Resident memory of the whole tree, in bytes."""
        total = 0
        for p in self.procs():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict:
        r = httpx.get(self.url + "/debug/stats", headers=self.headers, timeout=60)
        r.raise_for_status()
        return r.json()

    def wait_idle(self, timeout: float = 60.0) -> dict:
        """Poll /debug/stats until no request is live and the integrity check ran; return the stats."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.stats()
            if s["live_reqs"] == 0 and s["integrity"] != "busy":
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"server not idle after {timeout} s: {s}")
            time.sleep(0.2)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the launcher, then SIGKILL its group; assert no process of its tree survives."""
        self.procs()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group (we started it: our pgid)
        except ProcessLookupError:
            pass
        self.proc.wait(5)
        return self.proc.returncode

    def survivors(self, wait: float = 5.0) -> list[int]:
        deadline = time.monotonic() + wait
        while True:
            alive = [pid for pid in self.known if psutil.pid_exists(pid)
                     and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)


def start_server(tmp_dir: str, *args: str, api_key: str | None = None, env: dict | None = None,
                 wait: bool = True) -> Server:
    port = free_port()
    log_path = os.path.join(tmp_dir, f"server-{port}.log")
    cmd = [sys.executable, "-m", "minisgl_edu.serve", "--port", str(port), "--device", "cpu", *args]
    if api_key:
        cmd += ["--api-key", api_key]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "MINISGL_LOG": "INFO", **(env or {})}
    full_env.pop("MINISGL_API_KEY", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=full_env)
    server = Server(proc, port, log_path, api_key)
    if not wait:
        return server
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.healthy():
        server.procs()
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} during start-up:\n{server.log()[-4000:]}")
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"server not healthy after {STARTUP_TIMEOUT} s:\n{server.log()[-4000:]}")
        time.sleep(0.5)
    server.procs()
    return server

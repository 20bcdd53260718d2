"""Chapter 9 — the launcher: start every process, wait until each is ready, watch them, stop them all.

What it guarantees is chapter 9's "The launcher: ack before HTTP" and "A worker that dies".
`LLM(tp=N)` starts the same scheduler ranks through `start_workers(cfg, frontend=False)`.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..messages import ExitMsg
from ..config import SchedulerConfig, ServerConfig
from .queues import Addresses, Queue, pull, push
from .scheduler_proc import run_scheduler
from .tokenizer import tokenize_worker, worker_name

log = logging.getLogger("minisgl_edu")


class StartupError(RuntimeError):
    pass


NO_MAIN_GUARD = 78  # a spawned child's exit code: its parent's script starts processes as it is imported
MAIN_GUARD_HINT = ('this script starts worker processes (LLM(tp>1) or the server) at import time: put that code '
                   'under `if __name__ == "__main__":` (each worker imports the script again before it starts)')


def refuse_unguarded_main() -> None:
    """In a spawned child still importing its parent's script (no `__main__` guard there): leave at
    once, silently; the parent, which sees the exit code, says why once (a child would otherwise spawn again)."""
    if getattr(mp.current_process(), "_inheriting", False):
        os._exit(NO_MAIN_GUARD)


@dataclass
class Workers:
    addrs: Addresses
    procs: list[mp.Process]
    ack: Queue  # every worker's "ready" (rank 0's for the schedulers), and any rank's failure later
    entries: list[str]  # where a graceful stop's ExitMsg goes in: the tokenizers (or rank 0, for LLM(tp>1))
    stopping: threading.Event = field(default_factory=threading.Event)

    def dead(self) -> mp.Process | None:
        gone = [p for p in self.procs if p.exitcode is not None]
        # one killed by a signal is the cause; a rank that then exits because its peer vanished is a consequence
        return min(gone, key=lambda p: p.exitcode >= 0, default=None)


def start_workers(cfg: SchedulerConfig, frontend: bool = True) -> Workers:
    """Start the scheduler ranks (and with `frontend` the tokenizers and the detokenizer) and return
    once each has acked, or raise StartupError naming the culprit. Without `frontend` (`LLM(tp>1)`)
    the caller pushes to rank 0's mailbox and reads the detokenizer's address itself."""
    refuse_unguarded_main()
    n = cfg.num_tokenizers if frontend else 0
    addrs = Addresses.create(n, cfg.reply_socket)
    ack = pull(addrs.ack)  # bound before any child starts, so no ack is lost
    spawn = mp.get_context("spawn")  # a fresh interpreter: no inherited CUDA state or threads
    me = os.getpid()
    procs = [spawn.Process(target=run_scheduler, args=(rank, cfg, addrs, me), name=f"scheduler-rank{rank}",
                           daemon=True) for rank in range(cfg.tp)]
    procs += [spawn.Process(target=tokenize_worker, args=(i, cfg, addrs, me), daemon=True,
                            name=worker_name(i, n)) for i in range(n + 1 if frontend else 0)]
    workers = Workers(addrs, procs, ack, [addrs.tokenizer(i) for i in range(n)] if frontend else [addrs.scheduler])
    try:
        with child_env(**rank_env(cfg.device)):
            for p in procs:
                p.start()  # a spawned child reads the environment as it starts
        wait_for_acks(workers, cfg.startup_timeout)
    except BaseException:
        stop_workers(workers, graceful=False)
        raise
    return workers


SHORT_SPIN, LONG_SPIN = "1000", "300000"  # libgomp's turns before a waiting thread sleeps; the long one is its default
BUSY_CORES = 0.5  # the rank's cores busy with other work at launch (cores' worth) from which it spins short


def rank_env(device: str, probe=None) -> dict[str, str]:
    """What a scheduler rank's environment gains: on the CPU, how long its OpenMP threads spin before they sleep, chosen
    by how busy the rank's cores are as it starts (`probe`, default cores_busy). On a quiet machine libgomp's own long
    spin: the gaps between one forward's operators are longer than 1000 turns on some hosts (an Intel Xeon's forward ran
    ~25 % slower with them). Beside busy work the short spin, which leaves the cores to it: on 2 cores 10,000 turns lost
    ~40 % there, 1000 none (issue 18). Unknown (no /proc/stat): short. A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins."""
    if device != "cpu" or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return {}
    busy = (probe or cores_busy)()
    spin = LONG_SPIN if busy is not None and busy < BUSY_CORES else SHORT_SPIN
    log.info("CPU ranks: %s of this process's cores busy at launch, so their OpenMP threads spin %s turns",
             "unknown" if busy is None else f"{busy:.2f}", spin)
    return {"GOMP_SPINCOUNT": spin}


def core_times(stat: str) -> dict[int, tuple[int, int]]:
    """/proc/stat's text -> {core: (idle jiffies, all jiffies)} from its per-core lines; waiting on I/O counts as idle,
    time the hypervisor gave to another machine (steal) as busy."""
    out = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            v = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal (guest is inside user)
            out[int(name[3:])] = (v[3] + v[4], sum(v))
    return out


def busy_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cores) -> float:
    """Cores' worth of busy time on `cores` between two core_times readings: the counters are totals since boot, so
    only their difference says what the cores are doing now."""
    busy = 0.0
    for c in cores:
        if c in before and c in after and after[c][1] > before[c][1]:
            busy += 1 - (after[c][0] - before[c][0]) / (after[c][1] - before[c][1])
    return busy


def cores_busy(seconds: float = 0.2) -> float | None:
    """How many of this process's cores other work keeps busy, read from /proc/stat `seconds` apart (None: no
    /proc/stat, as on macOS)."""
    try:
        cores = os.sched_getaffinity(0)
        with open("/proc/stat") as f:
            before = core_times(f.read())
        time.sleep(seconds)  # this process sleeps, so what the counters show is everything else
        with open("/proc/stat") as f:
            after = core_times(f.read())
    except (OSError, AttributeError, ValueError):
        return None
    return busy_between(before, after, cores)


@contextmanager
def child_env(**env: str):
    """Set these environment variables (unless already set) for the processes started inside; then restore."""
    added = [k for k in env if k not in os.environ]
    os.environ.update({k: env[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def expected_acks(tp: int, num_tokenizers: int) -> set[str]:
    """Who must say 'ready': the primary scheduler rank only (it waits for the others), every tokenizer,
    and the detokenizer."""
    return {"scheduler-rank0"} | {worker_name(i, num_tokenizers) for i in range(num_tokenizers + 1)}


def wait_for_acks(workers: Workers, timeout: float) -> None:
    n = workers.addrs.num_tokenizers  # of those, the ones started (LLM(tp>1) starts no tokenizer)
    waiting = expected_acks(len(workers.procs), n) & {p.name for p in workers.procs}
    deadline = time.monotonic() + timeout
    while waiting:
        msg = workers.ack.get(timeout_ms=200)
        if msg is not None:
            if msg.error is not None:
                raise StartupError(f"{msg.name} (pid {msg.pid}) failed to start:\n{msg.error}")
            log.info("%s (pid %d) is ready", msg.name, msg.pid)
            waiting.discard(msg.name)
            continue
        dead = workers.dead()
        if dead is not None and dead.exitcode == NO_MAIN_GUARD:
            raise StartupError(MAIN_GUARD_HINT)
        if dead is not None:
            raise StartupError(f"{dead.name} (pid {dead.pid}) exited with code {dead.exitcode} before it was ready")
        if time.monotonic() > deadline:
            raise StartupError(f"not ready after {timeout:.0f} s: {', '.join(sorted(waiting))}")


def stop_workers(workers: Workers, graceful: bool = True) -> None:
    """ExitMsg down the pipes (graceful), then SIGTERM, then SIGKILL: every child is gone on return."""
    workers.stopping.set()
    if graceful:
        for addr in workers.entries:  # each tokenizer passes it on to the scheduler
            q = push(addr)
            q.put(ExitMsg())
            q.socket.close(linger=500)
    for sig, wait in (("nothing", 5.0 if graceful else 0.0), ("terminate", 3.0), ("kill", 3.0)):
        alive = [p for p in workers.procs if p.is_alive()]
        if not alive:
            break
        for p in alive:
            if sig != "nothing":
                getattr(p, sig)()
        deadline = time.monotonic() + wait
        for p in alive:
            p.join(max(0.0, deadline - time.monotonic()))
    workers.ack.close()
    shutil.rmtree(workers.addrs.root, ignore_errors=True)


def watch(workers: Workers, on_death) -> threading.Thread:
    """A thread that calls on_death(reason) once, when any worker exits while we are not stopping."""
    def run() -> None:
        while not workers.stopping.is_set():
            dead = workers.dead()
            if dead is not None:
                if not workers.stopping.is_set():
                    on_death(f"{dead.name} (pid {dead.pid}) exited with code {dead.exitcode}")
                return
            time.sleep(0.1)
    t = threading.Thread(target=run, daemon=True, name="watchdog")
    t.start()
    return t


def later(seconds: float, fn) -> None:
    t = threading.Timer(seconds, fn)
    t.daemon = True  # never keeps the process alive on its own
    t.start()


def http_stack(parser: str | None = None) -> tuple[str, str]:
    """uvicorn's event loop and HTTP parser: the compiled ones when installed (uvloop, httptools: less CPU per
    streamed event than asyncio's own loop and the pure-Python h11), or the `parser` asked for; named in the log."""
    from importlib.util import find_spec
    loop = "uvloop" if find_spec("uvloop") else "asyncio"
    http = parser or ("httptools" if find_spec("httptools") else "h11")  # ServerConfig refused a missing one
    log.info("HTTP: uvicorn with the %s event loop and the %s parser", loop, http)
    return loop, http


def serve_http(cfg: ServerConfig) -> int:
    """Start the workers, serve HTTP until a signal or a worker death; return the exit code."""
    import uvicorn

    from .api import Frontend, create_app
    workers = start_workers(cfg)
    died: list[str] = []
    try:
        frontend = Frontend(workers.addrs, cfg)
        frontend.pids = {p.name: p.pid for p in workers.procs}
        loop, http = http_stack(cfg.http_parser)
        server = uvicorn.Server(uvicorn.Config(create_app(cfg, frontend), host=cfg.host, port=cfg.port, loop=loop,
                                               http=http, log_level="warning", timeout_graceful_shutdown=2))

        def on_death(reason: str) -> None:
            died.append(reason)
            log.error("%s: shutting down", reason)
            if frontend.loop is not None:
                frontend.loop.call_soon_threadsafe(frontend.fail_all, reason)
            later(2.0, lambda: setattr(server, "should_exit", True))  # /health says 503 meanwhile

            def last_resort() -> None:  # if HTTP shutdown hangs: stop the children and leave anyway
                stop_workers(workers, graceful=False)
                os._exit(1)
            later(7.0, last_resort)

        watch(workers, on_death)
        log.info("serving %s on http://%s:%d", cfg.served_name, cfg.host, cfg.port)
        server.run()
        frontend.close_sockets()
    finally:
        log.info("stopping the workers")
        stop_workers(workers, graceful=not died)
        log.info("all workers stopped")
    return 1 if died else 0

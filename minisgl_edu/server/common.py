"""Chapter 9 — what every server process shares: how a child process behaves (its configuration: `config.py`).

A child (scheduler rank, tokenizer, detokenizer) ignores Ctrl-C (the launcher, which gets it too,
stops everyone in order), and exits by itself when its parent disappears, so a killed launcher
never leaves orphans holding memory.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback

from ..config import ServerConfig  # noqa: F401  (re-exported: the server's modules take it from here)

log = logging.getLogger("minisgl_edu")


def setup_child(name: str, parent_pid: int) -> None:
    """Call first thing in a child: logging with the process name, no Ctrl-C, die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=os.environ.get("MINISGL_LOG", "INFO"),
                        format=f"%(asctime)s [{name}] %(message)s", stream=sys.stderr)

    def watch_parent() -> None:
        while os.getppid() == parent_pid:  # a dead parent re-parents us to init: our ppid changes
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch_parent, daemon=True, name="watch-parent").start()


def exit_child(code: int = 0) -> None:
    """Leave now: deliver what our sockets still hold (1 s at most), then skip the interpreter's slow teardown."""
    import zmq
    zmq.Context.instance().destroy(linger=1000)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def send_ack(ack_addr: str, name: str, error: BaseException | None = None) -> None:
    """Tell the launcher this process is ready (or why it is not)."""
    from ..messages import AckMsg
    from .queues import push
    q = push(ack_addr)
    detail = None if error is None else "".join(traceback.format_exception(error)).strip()
    q.put(AckMsg(name, os.getpid(), detail))
    q.socket.close(linger=2000)  # linger: make sure the ack leaves before we might exit


def trace(cfg, proc: str, event: str, uids) -> None:
    """Append (wall time, process, event, uid) lines to cfg.hop_log: a request's journey, hop by hop."""
    if cfg.hop_log is None:
        return
    now = time.time()
    with open(cfg.hop_log, "a") as f:  # small appends to one file are not interleaved mid-line
        f.write("".join(json.dumps({"t": now, "proc": proc, "event": event, "uid": u}) + "\n" for u in uids))


def env_ms(name: str, default: float) -> float:
    """A threshold in ms from the environment; a value that is not a number >= 0 is refused by name."""
    raw = os.environ.get(name)
    try:
        value = default if raw is None else float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ValueError(f"{name}={raw!r}: expected a number of milliseconds >= 0 (0 turns the log off)")
    return value


# every server process logs each garbage collection longer than this (a stall every stream sees); 0: none
GC_LOG_MS = env_ms("MINISGL_GC_LOG_MS", 20.0)
# the API logs a step's replies that waited longer than this in one hop, the detokenizer a wake that took longer
# (at most once a second each; 0: never): a stall every stream sees, named where it happened
STALL_LOG_MS = env_ms("MINISGL_STALL_LOG_MS", 20.0)


class RateLimited:
    """True at most once every `seconds`: a stall that lasts logs once, not once a step."""

    def __init__(self, seconds: float = 1.0):
        self.seconds, self.last = seconds, -float("inf")

    def __call__(self, now: float) -> bool:
        if now - self.last < self.seconds:
            return False
        self.last = now
        return True


def freeze_startup_objects(name: str, gc_threshold: int | None = None) -> None:
    """Call once a process has loaded what it keeps (model, tokenizer, app): the collector never scans those
    objects again. A full collection walks every tracked object, and a process holding millions stops for
    tens to hundreds of ms, a stall every client of a streaming server sees as one long inter-token gap.

    `gc_threshold` replaces Python's 700 for the youngest generation. A collection runs once that many more
    tracked objects are alive than at the last one, and every streaming request holds ~70 (its coroutines,
    closures, futures): at 700, the API process collected whenever the requests in flight grew by ten, ~2 times
    a second at 42 req/s, each a stall of 0.3-2 ms for every stream (chapter 9). Above the requests' own
    working set, only garbage that reference counting cannot free (cycles) brings a collection on."""
    gc.collect()
    gc.freeze()
    if gc_threshold is not None:
        gc.set_threshold(gc_threshold, *gc.get_threshold()[1:])
    if GC_LOG_MS > 0:
        watch_gc(name, GC_LOG_MS)


def watch_gc(name: str, threshold_ms: float) -> None:
    """Log each collection that takes longer than threshold_ms (MINISGL_GC_LOG_MS=...): finds periodic stalls."""
    if any(getattr(cb, "watches_gc", False) for cb in gc.callbacks):
        return  # once a process: freeze_startup_objects may run again (tests)
    started = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif (ms := 1e3 * (time.perf_counter() - started[0])) > threshold_ms:
            log.warning("%s: gc generation %d took %.1f ms (%d collected)", name, info["generation"], ms,
                        info["collected"])
    callback.watches_gc = True
    gc.callbacks.append(callback)

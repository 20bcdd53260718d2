"""Chapter 9 — what every server process shares: its configuration and how a child process behaves.

A child (scheduler rank, tokenizer, detokenizer) ignores Ctrl-C (the launcher, which gets it too,
stops everyone in order), and exits by itself when its parent disappears, so a killed launcher
never leaves orphans holding memory.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass

log = logging.getLogger("minisgl_edu")


@dataclass
class ServerConfig:
    model_path: str
    served_name: str
    device: str = "cpu"
    tp: int = 1
    page_size: int = 1
    max_prefill_tokens: int = 8192
    cache: str = "radix"
    cuda_graph_max_bs: int = 256
    overlap: bool | None = None  # None: on for CUDA, off on the CPU
    dummy_weights: bool = False
    max_running_reqs: int = 256
    max_total_tokens: int | None = None
    context_length: int | None = None  # None: the model's max_position_embeddings
    num_tokenizers: int = 1
    host: str = "127.0.0.1"
    port: int = 1919
    api_key: str | None = None
    startup_timeout: float = 600.0
    trace_path: str | None = None  # the hop log (--hop-log): every process appends one JSON line per message hop
    step_trace_path: str | None = None  # --trace: scheduler rank 0 writes a Perfetto step trace here at shutdown
    skip_tokenizer_init: bool = False  # token ids in, token ids out: no process loads a tokenizer
    naive_stream: bool = False  # the per-token twins: one decode call per token, one SSE event per token


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


def trace(cfg: ServerConfig, proc: str, event: str, uids) -> None:
    """Append (wall time, process, event, uid) lines to cfg.trace_path: a request's journey, hop by hop."""
    if cfg.trace_path is None:
        return
    now = time.time()
    with open(cfg.trace_path, "a") as f:  # small appends to one file are not interleaved mid-line
        f.write("".join(json.dumps({"t": now, "proc": proc, "event": event, "uid": u}) + "\n" for u in uids))

"""Chapter 1 — the wires between processes: ZMQ sockets on `ipc://` paths in a private directory.

Each boundary is one-way: the receiver binds (it owns the address), senders connect; push/pull is
many senders to one receiver, pub/sub rank 0 to ranks 1..N-1. `get_raw`/`put_raw` move bytes
undecoded, so rank 0 forwards what it received untouched.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import zmq

from ..messages import decode, encode


@dataclass(frozen=True)
class Addresses:
    """Every address of one server, all inside one private directory."""
    root: str
    num_tokenizers: int

    @staticmethod
    def create(num_tokenizers: int) -> "Addresses":
        root = tempfile.mkdtemp(prefix="minisgl-")  # mkdtemp creates it with mode 0700
        os.chmod(root, 0o700)
        return Addresses(root, num_tokenizers)

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.root}/{name}"

    def tokenizer(self, i: int) -> str:
        return self._ipc(f"tokenizer-{i}")

    def tokenizer_of(self, uid: int) -> int:
        """The tokenizer every message of request `uid` goes to: one pipe, so an abort never overtakes its request."""
        return uid % self.num_tokenizers

    scheduler = property(lambda self: self._ipc("scheduler"))  # rank 0's inbox: every tokenizer pushes here
    ranks = property(lambda self: self._ipc("ranks"))  # rank 0 re-publishes raw bytes here for ranks 1..N-1
    detokenizer = property(lambda self: self._ipc("detokenizer"))
    frontend = property(lambda self: self._ipc("frontend"))
    ack = property(lambda self: self._ipc("ack"))

    @property
    def tp_init(self) -> str:  # torch.distributed rendezvous file (no TCP port)
        return f"file://{self.root}/tp-init"


class Queue:
    """One ZMQ socket with message (`put`/`get`) and raw-bytes (`put_raw`/`get_raw`) access."""

    def __init__(self, kind: int, addr: str, bind: bool, ctx: zmq.Context | None = None):
        self.socket = (ctx or zmq.Context.instance()).socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)  # closing never blocks on unsent messages of a dead peer
        if kind == zmq.SUB:
            self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        if kind == zmq.XPUB:
            self.socket.setsockopt(zmq.XPUB_VERBOSE, 1)  # pass on every subscription, not only the first
        (self.socket.bind if bind else self.socket.connect)(addr)

    def put_raw(self, raw: bytes) -> None:
        self.socket.send(raw, copy=False)

    def put(self, msg) -> None:
        self.put_raw(encode(msg))

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (waits at most timeout_ms)."""
        return bool(self.socket.poll(timeout_ms, zmq.POLLIN))

    def get_raw(self, timeout_ms: int | None = None) -> bytes | None:
        """The next message's bytes; None if nothing came within timeout_ms (None = wait forever)."""
        if timeout_ms is not None and not self.poll(timeout_ms):
            return None
        return self.socket.recv()

    def get(self, timeout_ms: int | None = None):
        raw = self.get_raw(timeout_ms)
        return None if raw is None else decode(raw)

    def ready(self) -> bool:
        """A message is waiting (a flag read, no system call beyond it: cheap enough to ask in a spin)."""
        return bool(self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def drain_raw(self) -> list[bytes]:
        """Everything already waiting, without blocking."""
        out = []
        while True:
            try:
                out.append(self.socket.recv(zmq.NOBLOCK))
            except zmq.Again:
                return out

    def close(self, linger_ms: int = 0) -> None:
        self.socket.close(linger=linger_ms)  # linger > 0: let the last messages leave first


def pull(addr: str) -> Queue:
    return Queue(zmq.PULL, addr, bind=True)


def push(addr: str) -> Queue:
    return Queue(zmq.PUSH, addr, bind=False)


def publisher(addr: str) -> Queue:
    # XPUB, not PUB: it also receives each subscriber's subscription, so rank 0 can wait until
    # every rank is listening (a plain PUB silently drops what it sends before that)
    return Queue(zmq.XPUB, addr, bind=True)


def subscriber(addr: str) -> Queue:
    return Queue(zmq.SUB, addr, bind=False)

"""Chapter 1 — the wires between processes: ZMQ sockets on `ipc://` paths in a private directory.

Each boundary is one-way: the receiver binds (it owns the address), senders connect; push/pull is
many senders to one receiver, pub/sub rank 0 to ranks 1..N-1. `get_raw`/`put_raw` move bytes
undecoded, so rank 0 forwards what it received untouched. The replies' two hops (scheduler ->
detokenizer -> API) go over plain UNIX stream sockets in the same directory (`unix://` addresses,
`Frames`): no I/O thread on either side, so a hop wakes one process, not three (`--no-reply-socket`: ZMQ).
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import tempfile
import time
from collections import deque
from dataclasses import dataclass

import zmq

from ..messages import decode, encode

log = logging.getLogger("minisgl_edu")


@dataclass(frozen=True)
class Addresses:
    """Every address of one server, all inside one private directory."""
    root: str
    num_tokenizers: int
    reply_socket: bool  # the detokenizer's and the API's inboxes: plain UNIX sockets (True) or ZMQ (config.py's switch)

    @staticmethod
    def create(num_tokenizers: int, reply_socket: bool) -> "Addresses":
        root = tempfile.mkdtemp(prefix="minisgl-")  # mkdtemp creates it with mode 0700
        os.chmod(root, 0o700)
        return Addresses(root, num_tokenizers, reply_socket)

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.root}/{name}"

    def _reply(self, name: str) -> str:
        return f"unix://{self.root}/{name}" if self.reply_socket else self._ipc(name)

    def tokenizer(self, i: int) -> str:
        return self._ipc(f"tokenizer-{i}")

    def tokenizer_of(self, uid: int) -> int:
        """The tokenizer every message of request `uid` goes to: one pipe, so an abort never overtakes its request."""
        return uid % self.num_tokenizers

    scheduler = property(lambda self: self._ipc("scheduler"))  # rank 0's inbox: every tokenizer pushes here
    ranks = property(lambda self: self._ipc("ranks"))  # rank 0 re-publishes raw bytes here for ranks 1..N-1
    detokenizer = property(lambda self: self._reply("detokenizer"))
    frontend = property(lambda self: self._reply("frontend"))
    ack = property(lambda self: self._ipc("ack"))

    @property
    def tp_init(self) -> str:  # torch.distributed rendezvous file (no TCP port)
        return f"file://{self.root}/tp-init"


class Messages:
    """What every end of a wire shares: a message is its `encode`d bytes (`put`/`get` over `put_raw`/`get_raw`)."""

    def put(self, msg) -> None:
        self.put_raw(encode(msg))

    def get(self, timeout_ms: int | None = None):
        raw = self.get_raw(timeout_ms)
        return None if raw is None else decode(raw)


class Queue(Messages):
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

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (waits at most timeout_ms)."""
        return bool(self.socket.poll(timeout_ms, zmq.POLLIN))

    def get_raw(self, timeout_ms: int | None = None) -> bytes | None:
        """The next message's bytes; None if nothing came within timeout_ms (None = wait forever)."""
        if timeout_ms is not None and not self.poll(timeout_ms):
            return None
        return self.socket.recv()

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


def pull(addr: str) -> Queue | SocketInbox:
    return SocketInbox(addr) if addr.startswith("unix://") else Queue(zmq.PULL, addr, bind=True)


def push(addr: str) -> Queue | SocketOutbox:
    return SocketOutbox(addr) if addr.startswith("unix://") else Queue(zmq.PUSH, addr, bind=False)


def publisher(addr: str) -> Queue:
    # XPUB, not PUB: it also receives each subscriber's subscription, so rank 0 can wait until
    # every rank is listening (a plain PUB silently drops what it sends before that)
    return Queue(zmq.XPUB, addr, bind=True)


def subscriber(addr: str) -> Queue:
    return Queue(zmq.SUB, addr, bind=False)


# ---- the replies' wire: plain UNIX stream sockets ----------------------------------------------------
HEADER = struct.Struct("<I")  # a frame: the message's length, then the message
CONNECT_TIMEOUT_S = 60.0  # a sender waits this long for its receiver to bind (they start in any order)
SEND_BUFFER = 4 << 20  # bytes a sender may queue before it blocks (the kernel may cap it lower)
READ_CHUNK = 256 << 10


class Frames:
    """Bytes in, whole messages out. A stream socket keeps no message boundaries: one read may hold several
    messages, or a piece of one, so each message travels behind its 4-byte length."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data) -> list[bytes]:
        """Add what one read returned; return the messages now complete, in order (a piece waits for the rest)."""
        buf = self.buf
        buf += data
        out, i, n = [], 0, len(buf)
        while n - i >= HEADER.size:
            (size,) = HEADER.unpack_from(buf, i)
            if n - i - HEADER.size < size:
                break
            out.append(bytes(buf[i + HEADER.size:i + HEADER.size + size]))
            i += HEADER.size + size
        if i:
            del buf[:i]
        return out


def frame(raw: bytes) -> bytes:
    return HEADER.pack(len(raw)) + raw


class SocketOutbox(Messages):
    """A sender's end of a `unix://` address, with Queue's put/put_raw. It connects at its first message (its
    receiver may bind later) and blocks only when the receiver's kernel buffer is full (back-pressure)."""

    def __init__(self, addr: str):
        self.path = addr.removeprefix("unix://")
        self.sock: socket.socket | None = None
        self.gone = False  # the receiver closed: later messages are dropped, as ZMQ drops them for a dead peer

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() > deadline:
                    raise ConnectionError(f"nothing listens at {self.path} after {CONNECT_TIMEOUT_S:.0f} s") from None
                time.sleep(0.005)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        return s

    def put_raw(self, raw: bytes) -> None:
        if self.gone:
            return
        if self.sock is None:
            self.sock = self._connect()
        try:
            self.sock.sendall(frame(raw))  # one system call for a step's message; a big one is copied once
        except (BrokenPipeError, ConnectionResetError):
            self.gone = True
            log.warning("the receiver at %s has gone: replies are dropped from now on", self.path)

    def close(self, linger_ms: int = 0) -> None:
        if self.sock is not None:  # what was sent is in the receiver's queue already: nothing to linger for
            self.sock.close()
            self.sock = None


class SocketInbox(Messages):
    """A receiver's end of a `unix://` address, with Queue's get/poll/drain: it listens, takes every sender that
    connects, and reads whole messages from each (one sender's messages stay in order)."""

    def __init__(self, addr: str):
        self.path = addr.removeprefix("unix://")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.frames: dict[socket.socket, Frames] = {}  # each connected sender's partial message
        self.waiting: deque[bytes] = deque()  # whole messages read, not yet taken
        self.chunk = memoryview(bytearray(READ_CHUNK))  # one read buffer, reused (no allocation per read)

    def _read(self, timeout_s: float | None) -> None:
        """Wait at most timeout_s (None: forever) for a socket to be ready; accept or read each ready one once."""
        for key, _ in self.selector.select(timeout_s):
            s = key.fileobj
            if s is self.listener:
                conn, _ = s.accept()
                conn.setblocking(False)
                self.selector.register(conn, selectors.EVENT_READ)
                self.frames[conn] = Frames()
                continue
            try:
                n = s.recv_into(self.chunk)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                n = 0
            if n == 0:  # the sender closed (or died): what it sent was read already
                self.selector.unregister(s)
                s.close()
                del self.frames[s]
                continue
            self.waiting.extend(self.frames[s].feed(self.chunk[:n]))

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (waits at most timeout_ms)."""
        deadline = time.monotonic() + timeout_ms / 1e3
        while not self.waiting:
            left = deadline - time.monotonic()
            if left < 0:
                return False
            self._read(left)
        return True

    def get_raw(self, timeout_ms: int | None = None) -> bytes | None:
        if timeout_ms is None:
            while not self.waiting:
                self._read(None)
        elif not self.poll(timeout_ms):
            return None
        return self.waiting.popleft()

    def ready(self) -> bool:
        if not self.waiting:
            self._read(0)
        return bool(self.waiting)

    def drain_raw(self) -> list[bytes]:
        """Everything already waiting, without blocking (a message still arriving in pieces waits for the next call)."""
        self._read(0)
        out = list(self.waiting)
        self.waiting.clear()
        return out

    def close(self, linger_ms: int = 0) -> None:
        for s in list(self.frames):
            s.close()
        self.frames.clear()
        self.selector.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

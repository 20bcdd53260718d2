"""Chapter 1 exercises — what crosses a process boundary. Write each function, then grade it:

    python -m minisgl_edu.exercises check 01

`encode` replaces `minisgl_edu.messages.encode` and `decode` replaces `messages.decode` (and the
queues' imports of them: every ZMQ socket of the server). The grader round-trips random messages
between your function and the library's (so your bytes are the library's wire format), checks the
refusals (2-D tensors, unknown types, unknown fields), then sends messages through real ZMQ sockets.

`feed` replaces `Frames.feed` in `minisgl_edu/server/queues.py`: the replies' plain sockets (scheduler ->
detokenizer -> API) read through it. The grader feeds it framed messages cut at random places, then sends
messages (a 1 MiB one among them) through a real socket pair that reads with your `feed`.
"""
from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import torch

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.messages import _DTYPES, MESSAGE_TYPES, MessageError  # noqa: F401  (name -> class; dtype name -> dtype)
from minisgl_edu.server.queues import HEADER  # noqa: F401  (struct.Struct("<I"): a frame's length, 4 bytes)


def encode(msg) -> bytes:
    """A message dataclass -> bytes on the wire: msgpack.packb(wire form, use_bin_type=True).

    The wire form, recursively: a message dataclass -> {"__type__": class name, field: wire form of
    the field, ...} (only classes in MESSAGE_TYPES: else MessageError); a torch tensor ->
    {"__type__": "Tensor", "dtype": "int32" (the dtype's name without "torch."), "buffer": raw bytes},
    and only a 1-D CPU tensor of a dtype in _DTYPES may cross (else MessageError); lists and tuples
    -> lists; a dict -> a dict (string keys, no "__type__" key: else MessageError); None, bool,
    int, float, str, bytes as they are; anything else -> MessageError."""
    raise NotAttempted  # your code here


def decode(raw: bytes):
    """Bytes from the wire -> a message dataclass: the inverse of encode, and a careful one. It builds
    only the classes in MESSAGE_TYPES (an unknown "__type__" is a MessageError, never a lookup
    anywhere else), a Tensor only from exactly {"__type__", "dtype", "buffer"} with a dtype in
    _DTYPES (a fresh, writable tensor: copy the buffer), and a class only from fields it has. Bytes
    that are not msgpack, or not a dict with "__type__" at the top, are a MessageError too."""
    raise NotAttempted  # your code here


def feed(self, data) -> list[bytes]:
    """Frames.feed: `data` is what one read of a stream socket returned (bytes or a memoryview). On the wire each
    message is HEADER.pack(len(message)) + message, back to back, but a read may end anywhere: mid-header,
    mid-message, or after several messages. Add `data` to `self.buf` (a bytearray that lives across calls) and
    return every message now complete, in order, as bytes without its header; keep the incomplete rest in
    `self.buf` for the next call (a message of length 0 is a message too)."""
    raise NotAttempted  # your code here
